// Opening a RocksDB data directory with named column families, for every component.
//
// RocksStore owns the DB and its column-family handles and closes the handles before the
// DB. A directory already opened by another process fails fast with FAILED_PRECONDITION
// naming the directory (RocksDB's LOCK file), so two agents never share an outbox.
#ifndef EONCE_COMMON_STORE_ROCKS_H_
#define EONCE_COMMON_STORE_ROCKS_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "rocksdb/cache.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"
#include "rocksdb/write_batch.h"

namespace eonce {

struct ColumnFamilySpec {
  std::string name;
  rocksdb::ColumnFamilyOptions options;
  // How the family is written and read, which shapes its memtables (RocksStore::Open).
  // Point lookups of keys it does not hold are common (a first-seen command's inbox entry,
  // key owner or sidecar record): a bloom filter over each memtable's keys answers them
  // without a search of the skiplist. False for a family that is only scanned, or whose
  // lookups find their key: there every insert would fill a filter that no read uses.
  bool lookups_miss = true;
  // Each memtable insert starts where the last one with the same tag went (the key's first
  // `hint_tag_bytes` bytes), instead of a search from the skiplist's top: for keys that
  // arrive in ascending order behind a short tag (a sequence number, alone or after a
  // one-byte state), or that are rewritten again and again (a busy account, whose new
  // version goes right before its last). A key out of place is still put right, at the
  // cost of that search. Each tag a memtable sees costs it an insert position (about 220
  // bytes of its arena, and an entry of a map beside it): a family whose keys are mostly
  // new to their memtable fills it faster and gains nothing. Unset: every insert searches.
  std::optional<size_t> hint_tag_bytes;
  // The family is read only by rare scans (an operator's query), never by a point lookup
  // or a scan on a hot path. Its memtables keep keys in arrival order (RocksDB's vector
  // memtable): an insert is an append, not a search of a skiplist, and each memtable is
  // sorted once, when it is flushed or first scanned after it stops taking writes. A scan
  // or a lookup of the memtable still being written copies and sorts it, so its memtables
  // are kept at kUnsortedWriteBufferBytes. A store with such a family writes each write
  // group's memtables from the group's leader alone (RocksDB's concurrent memtable writes
  // need skiplists).
  bool unsorted_memtable = false;
};

// The memtable size of a family with `unsorted_memtable`: a scan of the one being written
// sorts a copy of at most this many bytes of keys.
inline constexpr size_t kUnsortedWriteBufferBytes = 4 << 20;

struct StoreOptions {
  // Bounded memory: a shared block cache and small memtables. 128 MiB holds the data
  // blocks of about 600,000 sidecar records of the bench's shape (a million take 204 MiB).
  size_t block_cache_bytes = 128 << 20;
  size_t write_buffer_bytes = 16 << 20;
  // How often RocksDB compacts files whose data is older than this, so that TTL filters
  // run even when no new writes arrive. 0 = off.
  uint64_t periodic_compaction_seconds = 6 * 3600;
  rocksdb::Env* env = nullptr;  // for the simulation's crash-simulating file system
  // No RocksDB info LOG file (the simulation opens thousands of stores).
  bool discard_info_log = false;
  // Threads that open table files at startup; our stores have few files.
  int max_file_opening_threads = 2;
  // Free space to keep on the store's file system. While less is free, writes are
  // refused with RESOURCE_EXHAUSTED (STORE_FULL) before they reach RocksDB, and they
  // resume by themselves once space returns: the store never runs into ENOSPC in the
  // middle of a write. Keep it above the bytes that can be in flight at once. 0: no check.
  uint64_t min_free_bytes = 0;
  // WhenDurable syncs on the caller's thread and calls back before it returns, instead of
  // leaving it to the committer thread: the deterministic simulation, and unit tests that
  // drive a component on one thread.
  bool inline_durability = false;
  // Unsynced writes stay in the log's buffer in this process's memory until the next sync
  // (AwaitDurable writes the buffer, then syncs: one write system call per group commit
  // instead of one per write group). A process kill then loses them, as a power cut
  // would. Only for a store that awaits every unsynced write before it acknowledges
  // anything, and whose unawaited writes are redone when lost (the business's inbox: the
  // effect, its entry, the follow-ups' acks). The sidecar's outcome records and the
  // outbox's transitions are written unsynced and not awaited: they survive a process
  // kill in the page cache, so that a restart answers from them at once (instead of
  // waiting out a lease, or sending a command again); their stores keep it off.
  bool buffer_log_until_sync = false;
};

class RocksStore {
 public:
  ~RocksStore();
  RocksStore(const RocksStore&) = delete;
  RocksStore& operator=(const RocksStore&) = delete;

  // Opens (creating if needed) `path` with the default column family plus `families`.
  static absl::StatusOr<std::unique_ptr<RocksStore>> Open(
      const std::string& path, std::vector<ColumnFamilySpec> families,
      const StoreOptions& options);

  // The handle of a column family named at Open; aborts on a programmer error.
  rocksdb::ColumnFamilyHandle* cf(const std::string& name) const;
  // Whether a column family of that name was opened (for names read from data).
  bool has_cf(const std::string& name) const { return handles_.count(name) > 0; }

  // Reads: what the components built on the store use (every write goes through Write).
  // `key` in column family `family`; NotFound when it holds none.
  rocksdb::Status Get(const std::string& family, const rocksdb::Slice& key, std::string* value);
  // An iterator over `family`, reading the state of `snapshot` when one is given.
  std::unique_ptr<rocksdb::Iterator> NewIterator(const std::string& family,
                                                 const rocksdb::Snapshot* snapshot = nullptr);
  // A consistent view across keys and families, released when the last holder drops it.
  std::shared_ptr<const rocksdb::Snapshot> Snapshot();
  // Reads `family` in key order into the block cache until the cache holds `max_bytes`,
  // the family ends or `stop()` says so (asked every few hundred keys), so that reads
  // after a restart find their blocks in memory instead of each paying a read from disk
  // and a decompression. Returns the bytes the cache holds after.
  absl::StatusOr<size_t> WarmCache(const std::string& family, size_t max_bytes,
                                   const std::function<bool()>& stop);
  // The bytes the block cache holds, and the most it may hold.
  size_t block_cache_usage() const { return cache_->GetUsage(); }
  size_t block_cache_capacity() const { return cache_->GetCapacity(); }
  // Flushes `family`'s memtable and compacts all of it, so compaction filters see every
  // entry (the periodic maintenance that drops what retention let go).
  absl::Status FlushAndCompact(const std::string& family);

  // RocksDB itself, for tests and benchmarks that reach under the store (tampering with
  // entries, measuring raw writes). Components use the calls above.
  rocksdb::DB* db() { return db_.get(); }
  // Flushes memtables and closes. Safe to call twice.
  absl::Status Close();
  // Closes without flushing anything, as a crashed process would leave it (the
  // simulation, with a CrashFileSystem that already dropped what was not synced).
  void CloseWithoutFlush();
  // A circuit breaker for write failures. Once a write to the disk failed (a full disk,
  // an fsync error), writers stop writing and the component reports itself unready until
  // it restarts: RocksDB's own recovery from such errors is not safe in every build, and
  // a restart replays the WAL with nothing lost.
  void MarkFailed() { failed_.store(true); }
  bool failed() const { return failed_.load(); }

  // Writes `batch` through the circuit breaker: refused (UNAVAILABLE, STORE_FAILED) once the
  // store failed; a failed write trips the breaker. `sync` as each call site decides.
  absl::Status Write(rocksdb::WriteBatch* batch, bool sync, const char* what);
  // What Write would refuse now before writing anything: a failed store (STORE_FAILED) or
  // too little free space (CheckSpace). For a step that must not begin unless its later
  // write can be made.
  absl::Status CheckWritable() const;

  // Group commit. Returns once every write made before the call is on disk: the calls
  // that wait together share one fsync of the write-ahead log. The pattern it serves is
  // "write unsynced under the caller's lock, release the lock, await durability, then
  // answer": a later write that read this one's state lands after it in the log, so the
  // sync that makes the later one durable makes this one durable too, and no answer ever
  // rests on a write that a power cut could take back. A failed sync trips the breaker.
  absl::Status AwaitDurable();
  // The same without blocking: calls `done` once every write made before this call is on
  // disk - at once when it already is, otherwise from the store's committer thread right
  // after the fsync that covers it, which serves every call waiting at that moment. `done`
  // must be quick and must not block (it answers a call, or starts the next step).
  using DurableFn = std::function<void(absl::Status)>;
  void WhenDurable(DurableFn done);
  // WhenDurable for a caller that may spend its own thread on the sync (a unary call's
  // handler). On a quiet store - no sync under way, nothing waiting for the committer,
  // and one caller at a time in the recent syncs - it syncs here and calls `done` before
  // it returns, which spares the call the hand-off to the committer thread and back (two
  // wake-ups of another thread). As soon as a sync serves several callers, or others
  // come during a caller's own, the store is busy, and the group commit stays on the
  // committer until kQuietRounds of its rounds in a row served one caller each: under
  // load no caller's thread waits on the disk.
  void WhenDurableLeadingWhenIdle(DurableFn done);
  static constexpr int kQuietRounds = 8;
  // How many calls of WhenDurableLeadingWhenIdle synced on their own thread (the metric
  // eonce_<service>_syncs_on_caller_total).
  uint64_t led_syncs() const { return led_syncs_.load(std::memory_order_relaxed); }
  // Explicit group commit, for a write that nobody needs to read before it is durable:
  // queues `batch` for the committer thread, which writes every batch queued meanwhile, in
  // queue order, then syncs once and calls back. The caller's thread never waits on the
  // store (gRPC's few callback threads stay free), and the writes of a group meet no
  // other writer in RocksDB's write queue. `done(status, written)`: OK once the batch is
  // durable; otherwise the error, with `written` false when the batch never reached the
  // store (refused at once, or its write failed) and true when its sync failed. A
  // WhenDurable queued after this call is served after this batch is durable. The queue
  // holds one entry per waiting caller: it is bounded by the calls in flight.
  using WrittenFn = std::function<void(absl::Status status, bool written)>;
  void WriteWhenDurable(rocksdb::WriteBatch batch, const char* what, WrittenFn done);

  // Readiness: a synced write of a probe key in the default column family. Through the
  // breaker, so after a failure it stays failed without touching the disk; refused while
  // free space is below the reserve.
  absl::Status ProbeWrite();

  // RESOURCE_EXHAUSTED while the file system has less free space than min_free_bytes.
  // It looks at the file system (statvfs) on every call near the reserve; with more than
  // kSpaceLookMargin above it, one look serves the calls of the next kSpaceLookReuse.
  absl::Status CheckSpace() const;
  static constexpr uint64_t kSpaceLookMargin = uint64_t{1} << 30;
  static constexpr std::chrono::nanoseconds kSpaceLookReuse = std::chrono::milliseconds(1);
  // How many times CheckSpace looked at the file system.
  uint64_t space_looks() const { return space_looks_.load(std::memory_order_relaxed); }

  // Total live SST bytes plus memtable bytes, for metrics and benchmarks.
  uint64_t ApproximateBytes();

 private:
  RocksStore() = default;
  void CommitterLoop();
  void StopCommitter();

  std::unique_ptr<rocksdb::DB> db_;
  std::shared_ptr<rocksdb::Cache> cache_;  // every family's data blocks
  std::string path_;
  uint64_t min_free_bytes_ = 0;
  mutable std::atomic<int64_t> roomy_until_ns_{0};  // steady clock; until then, no look
  mutable std::atomic<uint64_t> space_looks_{0};
  std::map<std::string, rocksdb::ColumnFamilyHandle*> handles_;
  std::atomic<bool> failed_{false};
  absl::Mutex sync_mu_;
  bool syncing_ ABSL_GUARDED_BY(sync_mu_) = false;
  uint64_t durable_seq_ ABSL_GUARDED_BY(sync_mu_) = 0;  // every write up to it is synced

  // The committer: WhenDurable's and WriteWhenDurable's waiters, in arrival order, served
  // by one thread started on first use.
  struct Waiter {
    std::optional<rocksdb::WriteBatch> batch;  // to write first; none: a sync is awaited
    const char* what = "";
    WrittenFn done;
  };
  void Enqueue(Waiter waiter);
  // Whether WhenDurable answers on the caller's thread with no sync of its own: every
  // write is durable already, the store failed, or durability is inline.
  bool AnsweredAtOnce();
  bool inline_durability_ = false;
  absl::Mutex committer_mu_;
  std::vector<Waiter> waiters_ ABSL_GUARDED_BY(committer_mu_);
  // Batches queued and not yet written (raised under committer_mu_ as one is queued,
  // lowered once it is written): while there is one, a WhenDurable that comes after it
  // is not answered at once.
  std::atomic<int> unwritten_{0};
  bool stop_committer_ ABSL_GUARDED_BY(committer_mu_) = false;
  // The committer is between taking a group and answering it.
  bool committing_ ABSL_GUARDED_BY(committer_mu_) = false;
  // Committer rounds in a row that served one caller each, up to kQuietRounds; at that the
  // store is quiet (WhenDurableLeadingWhenIdle may sync on the caller's thread). 0 once a
  // sync served several callers, or others came during a caller's own.
  int single_rounds_ ABSL_GUARDED_BY(committer_mu_) = kQuietRounds;
  std::atomic<uint64_t> led_syncs_{0};
  std::thread committer_;
};

// Write options with sync set deliberately; the reason goes with each call site.
rocksdb::WriteOptions SyncedWrite();
rocksdb::WriteOptions UnsyncedWrite();

}  // namespace eonce

#endif  // EONCE_COMMON_STORE_ROCKS_H_
