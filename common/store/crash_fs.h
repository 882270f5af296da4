// CrashFileSystem: a RocksDB FileSystem wrapper that decides what survives a crash.
//
// It tracks, for every file written through it, how much was written and how much was
// synced. Crash() freezes it: from then on every write, sync, delete and rename of the
// dying process is ignored. Recover() truncates every file to its synced length, so what
// was never synced is lost, as after a power cut, and lets a new process open the data.
// Syncs do not reach the disk by default (`real_sync` false): durability is modelled, so
// a simulation runs fast and the same seed gives the same result.
//
// It can also fail writes or syncs on demand, to test that a component fails closed.
// Thread-safe.
#ifndef EONCE_COMMON_STORE_CRASH_FS_H_
#define EONCE_COMMON_STORE_CRASH_FS_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "rocksdb/env.h"
#include "rocksdb/file_system.h"

namespace eonce {

class CrashFileSystem : public rocksdb::FileSystemWrapper {
 public:
  explicit CrashFileSystem(bool real_sync = false);

  const char* Name() const override { return "eonce.CrashFileSystem"; }

  rocksdb::IOStatus NewWritableFile(const std::string& fname, const rocksdb::FileOptions& options,
                                    std::unique_ptr<rocksdb::FSWritableFile>* result,
                                    rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus ReopenWritableFile(const std::string& fname,
                                       const rocksdb::FileOptions& options,
                                       std::unique_ptr<rocksdb::FSWritableFile>* result,
                                       rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus ReuseWritableFile(const std::string& fname, const std::string& old_fname,
                                      const rocksdb::FileOptions& options,
                                      std::unique_ptr<rocksdb::FSWritableFile>* result,
                                      rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus DeleteFile(const std::string& fname, const rocksdb::IOOptions& options,
                               rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus RenameFile(const std::string& src, const std::string& target,
                               const rocksdb::IOOptions& options,
                               rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus NewDirectory(const std::string& name, const rocksdb::IOOptions& options,
                                 std::unique_ptr<rocksdb::FSDirectory>* result,
                                 rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus LinkFile(const std::string& src, const std::string& target,
                             const rocksdb::IOOptions& options,
                             rocksdb::IODebugContext* dbg) override;

  // The process dies now: nothing it does from here on reaches the disk.
  void Crash();
  // Loses what was not synced, and opens the file system to a new process.
  void Recover();
  bool frozen() const { return frozen_.load(); }

  // Failure injection: every write (or sync) fails with an I/O error while set.
  void set_fail_writes(bool fail) { fail_writes_ = fail; }
  void set_fail_syncs(bool fail) { fail_syncs_ = fail; }
  // A full disk: syncs fail with "no space" while set. (Failing the appends as well
  // trips an assertion in Debian's RocksDB build once writing resumes.)
  void set_no_space(bool full) { no_space_ = full; }
  // A negative control: while set, syncing the write-ahead log makes nothing durable, as
  // if every synced write were written unsynced; a crash then loses them.
  void set_drop_wal_syncs(bool drop) { drop_wal_syncs_ = drop; }
  bool drop_wal_syncs() const { return drop_wal_syncs_.load(); }
  // Runs `hook` on the syncing thread before each sync of a write-ahead log (a test that
  // needs something to happen while a sync is under way); empty: none.
  void set_before_wal_sync(std::function<void()> hook);
  bool no_space() const { return no_space_.load(); }

  // An Env over this file system, for rocksdb::Options::env.
  rocksdb::Env* env() { return env_.get(); }

  // Called by the tracked files.
  bool Dead(uint64_t generation) const { return generation != generation_.load(); }
  uint64_t generation() const { return generation_.load(); }
  void Written(const std::string& fname, uint64_t size);
  void Synced(const std::string& fname);
  void BeforeWalSync();
  bool fail_writes() const { return fail_writes_.load(); }
  bool fail_syncs() const { return fail_syncs_.load(); }
  bool real_sync() const { return real_sync_; }

 private:
  struct FileState {
    uint64_t written = 0;
    uint64_t synced = 0;
  };
  rocksdb::IOStatus Wrap(const std::string& fname, rocksdb::IOStatus status,
                         std::unique_ptr<rocksdb::FSWritableFile>* result, uint64_t start);

  friend std::shared_ptr<CrashFileSystem> NewCrashFileSystem(bool real_sync);

  const bool real_sync_;
  std::atomic<bool> frozen_{false};
  std::atomic<uint64_t> generation_{1};
  std::atomic<bool> fail_writes_{false};
  std::atomic<bool> fail_syncs_{false};
  std::atomic<bool> no_space_{false};
  std::atomic<bool> drop_wal_syncs_{false};
  absl::Mutex mu_;
  std::map<std::string, FileState> files_ ABSL_GUARDED_BY(mu_);
  std::function<void()> before_wal_sync_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<rocksdb::Env> env_;
};

// Makes a CrashFileSystem; keep the shared_ptr for as long as any DB uses its env().
std::shared_ptr<CrashFileSystem> NewCrashFileSystem(bool real_sync = false);

}  // namespace eonce

#endif  // EONCE_COMMON_STORE_CRASH_FS_H_
