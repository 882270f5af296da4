#include "common/store/crash_fs.h"

#include "absl/strings/match.h"

#include <unistd.h>

namespace eonce {
namespace {

using rocksdb::IODebugContext;
using rocksdb::IOOptions;
using rocksdb::IOStatus;
using rocksdb::Slice;

// A file of a process that died: accepts everything, keeps nothing.
class DeadFile : public rocksdb::FSWritableFile {
 public:
  IOStatus Append(const Slice&, const IOOptions&, IODebugContext*) override { return IOStatus::OK(); }
  IOStatus Append(const Slice&, const IOOptions&, const rocksdb::DataVerificationInfo&,
                  IODebugContext*) override {
    return IOStatus::OK();
  }
  IOStatus Close(const IOOptions&, IODebugContext*) override { return IOStatus::OK(); }
  IOStatus Flush(const IOOptions&, IODebugContext*) override { return IOStatus::OK(); }
  IOStatus Sync(const IOOptions&, IODebugContext*) override { return IOStatus::OK(); }
  uint64_t GetFileSize(const IOOptions&, IODebugContext*) override { return size_; }

 private:
  uint64_t size_ = 0;
};

class TrackedFile : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  TrackedFile(CrashFileSystem* fs, std::string fname, std::unique_ptr<rocksdb::FSWritableFile> base,
              uint64_t start)
      : FSWritableFileOwnerWrapper(std::move(base)),
        fs_(fs),
        fname_(std::move(fname)),
        generation_(fs->generation()),
        size_(start) {}

  IOStatus Append(const Slice& data, const IOOptions& options, IODebugContext* dbg) override {
    if (fs_->Dead(generation_)) return IOStatus::OK();
    if (fs_->fail_writes()) return IOStatus::IOError("injected write error");
    IOStatus s = target()->Append(data, options, dbg);
    if (s.ok()) {
      size_ += data.size();
      fs_->Written(fname_, size_);
    }
    return s;
  }
  IOStatus Append(const Slice& data, const IOOptions& options,
                  const rocksdb::DataVerificationInfo&, IODebugContext* dbg) override {
    return Append(data, options, dbg);
  }
  IOStatus PositionedAppend(const Slice& data, uint64_t offset, const IOOptions& options,
                            IODebugContext* dbg) override {
    if (fs_->Dead(generation_)) return IOStatus::OK();
    if (fs_->fail_writes()) return IOStatus::IOError("injected write error");
    IOStatus s = target()->PositionedAppend(data, offset, options, dbg);
    if (s.ok()) {
      size_ = std::max(size_, offset + data.size());
      fs_->Written(fname_, size_);
    }
    return s;
  }
  IOStatus PositionedAppend(const Slice& data, uint64_t offset, const IOOptions& options,
                            const rocksdb::DataVerificationInfo&, IODebugContext* dbg) override {
    return PositionedAppend(data, offset, options, dbg);
  }
  IOStatus Truncate(uint64_t size, const IOOptions& options, IODebugContext* dbg) override {
    if (fs_->Dead(generation_)) return IOStatus::OK();
    IOStatus s = target()->Truncate(size, options, dbg);
    if (s.ok()) {
      size_ = size;
      fs_->Written(fname_, size_);
    }
    return s;
  }
  IOStatus Sync(const IOOptions& options, IODebugContext* dbg) override { return DoSync(options, dbg); }
  IOStatus Fsync(const IOOptions& options, IODebugContext* dbg) override { return DoSync(options, dbg); }
  IOStatus RangeSync(uint64_t, uint64_t, const IOOptions&, IODebugContext*) override {
    // A partial sync promises nothing here; only Sync and Fsync make data durable.
    return IOStatus::OK();
  }
  IOStatus Flush(const IOOptions& options, IODebugContext* dbg) override {
    if (fs_->Dead(generation_)) return IOStatus::OK();
    return target()->Flush(options, dbg);
  }
  IOStatus Close(const IOOptions& options, IODebugContext* dbg) override {
    if (fs_->Dead(generation_)) return IOStatus::OK();
    return target()->Close(options, dbg);
  }

 private:
  IOStatus DoSync(const IOOptions& options, IODebugContext* dbg) {
    if (fs_->Dead(generation_)) return IOStatus::OK();
    if (fs_->fail_syncs()) return IOStatus::IOError("injected sync error");
    if (fs_->no_space()) return IOStatus::NoSpace("injected: no space left on device");
    const bool wal = absl::EndsWith(fname_, ".log");
    if (wal) fs_->BeforeWalSync();
    IOStatus s = target()->Flush(options, dbg);
    if (s.ok() && fs_->real_sync()) s = target()->Sync(options, dbg);
    if (s.ok() && !(fs_->drop_wal_syncs() && wal)) {
      fs_->Synced(fname_);
    }
    return s;
  }

  CrashFileSystem* fs_;
  const std::string fname_;
  const uint64_t generation_;
  uint64_t size_;
};

// A directory whose syncs are modelled rather than done: renames and creations are
// durable at once in this model.
class ModelledDirectory : public rocksdb::FSDirectory {
 public:
  explicit ModelledDirectory(std::unique_ptr<rocksdb::FSDirectory> base) : base_(std::move(base)) {}
  IOStatus Fsync(const IOOptions&, IODebugContext*) override { return IOStatus::OK(); }
  IOStatus FsyncWithDirOptions(const IOOptions&, IODebugContext*,
                               const rocksdb::DirFsyncOptions&) override {
    return IOStatus::OK();
  }
  IOStatus Close(const IOOptions& options, IODebugContext* dbg) override {
    return base_->Close(options, dbg);
  }
  size_t GetUniqueId(char* id, size_t max_size) const override {
    return base_->GetUniqueId(id, max_size);
  }

 private:
  std::unique_ptr<rocksdb::FSDirectory> base_;
};

}  // namespace

IOStatus CrashFileSystem::NewDirectory(const std::string& name, const IOOptions& options,
                                       std::unique_ptr<rocksdb::FSDirectory>* result,
                                       IODebugContext* dbg) {
  IOStatus s = target()->NewDirectory(name, options, result, dbg);
  if (s.ok() && !real_sync_) *result = std::make_unique<ModelledDirectory>(std::move(*result));
  return s;
}

CrashFileSystem::CrashFileSystem(bool real_sync)
    : FileSystemWrapper(rocksdb::FileSystem::Default()), real_sync_(real_sync) {}

std::shared_ptr<CrashFileSystem> NewCrashFileSystem(bool real_sync) {
  auto fs = std::make_shared<CrashFileSystem>(real_sync);
  fs->env_ = rocksdb::NewCompositeEnv(fs);
  return fs;
}

IOStatus CrashFileSystem::Wrap(const std::string& fname, IOStatus status,
                               std::unique_ptr<rocksdb::FSWritableFile>* result, uint64_t start) {
  if (!status.ok()) return status;
  {
    absl::MutexLock lock(&mu_);
    FileState& state = files_[fname];
    state.written = start;
    state.synced = std::min(state.synced, start);
  }
  *result = std::make_unique<TrackedFile>(this, fname, std::move(*result), start);
  return status;
}

IOStatus CrashFileSystem::NewWritableFile(const std::string& fname, const rocksdb::FileOptions& options,
                                          std::unique_ptr<rocksdb::FSWritableFile>* result,
                                          IODebugContext* dbg) {
  if (frozen_) {
    *result = std::make_unique<DeadFile>();
    return IOStatus::OK();
  }
  {
    absl::MutexLock lock(&mu_);
    files_[fname] = FileState{};
  }
  return Wrap(fname, target()->NewWritableFile(fname, options, result, dbg), result, 0);
}

IOStatus CrashFileSystem::ReopenWritableFile(const std::string& fname,
                                             const rocksdb::FileOptions& options,
                                             std::unique_ptr<rocksdb::FSWritableFile>* result,
                                             IODebugContext* dbg) {
  if (frozen_) {
    *result = std::make_unique<DeadFile>();
    return IOStatus::OK();
  }
  uint64_t size = 0;
  target()->GetFileSize(fname, IOOptions(), &size, dbg).PermitUncheckedError();
  {
    absl::MutexLock lock(&mu_);
    auto it = files_.find(fname);
    // An existing file we did not write is durable as it stands.
    if (it == files_.end()) files_[fname] = FileState{size, size};
  }
  return Wrap(fname, target()->ReopenWritableFile(fname, options, result, dbg), result, size);
}

IOStatus CrashFileSystem::ReuseWritableFile(const std::string& fname, const std::string& old_fname,
                                            const rocksdb::FileOptions& options,
                                            std::unique_ptr<rocksdb::FSWritableFile>* result,
                                            IODebugContext* dbg) {
  if (frozen_) {
    *result = std::make_unique<DeadFile>();
    return IOStatus::OK();
  }
  {
    absl::MutexLock lock(&mu_);
    files_.erase(old_fname);
    files_[fname] = FileState{};
  }
  return Wrap(fname, target()->ReuseWritableFile(fname, old_fname, options, result, dbg), result, 0);
}

IOStatus CrashFileSystem::DeleteFile(const std::string& fname, const IOOptions& options,
                                     IODebugContext* dbg) {
  if (frozen_) return IOStatus::OK();
  IOStatus s = target()->DeleteFile(fname, options, dbg);
  if (s.ok()) {
    absl::MutexLock lock(&mu_);
    files_.erase(fname);
  }
  return s;
}

IOStatus CrashFileSystem::RenameFile(const std::string& src, const std::string& target_name,
                                     const IOOptions& options, IODebugContext* dbg) {
  if (frozen_) return IOStatus::OK();
  IOStatus s = target()->RenameFile(src, target_name, options, dbg);
  if (s.ok()) {
    absl::MutexLock lock(&mu_);
    auto it = files_.find(src);
    if (it != files_.end()) {
      files_[target_name] = it->second;
      files_.erase(it);
    } else {
      files_.erase(target_name);
    }
  }
  return s;
}

IOStatus CrashFileSystem::LinkFile(const std::string& src, const std::string& target_name,
                                   const IOOptions& options, IODebugContext* dbg) {
  if (frozen_) return IOStatus::OK();
  return target()->LinkFile(src, target_name, options, dbg);
}

void CrashFileSystem::Written(const std::string& fname, uint64_t size) {
  absl::MutexLock lock(&mu_);
  files_[fname].written = size;
}

void CrashFileSystem::set_before_wal_sync(std::function<void()> hook) {
  absl::MutexLock lock(&mu_);
  before_wal_sync_ = std::move(hook);
}

void CrashFileSystem::BeforeWalSync() {
  std::function<void()> hook;
  {
    absl::MutexLock lock(&mu_);
    hook = before_wal_sync_;
  }
  if (hook) hook();
}

void CrashFileSystem::Synced(const std::string& fname) {
  absl::MutexLock lock(&mu_);
  FileState& state = files_[fname];
  state.synced = state.written;
}

void CrashFileSystem::Crash() {
  frozen_ = true;
  generation_.fetch_add(1);
}

void CrashFileSystem::Recover() {
  {
    absl::MutexLock lock(&mu_);
    for (auto& [fname, state] : files_) {
      if (state.written > state.synced) {
        if (truncate(fname.c_str(), static_cast<off_t>(state.synced)) == 0) {
          state.written = state.synced;
        }
      }
    }
  }
  frozen_ = false;
}

}  // namespace eonce
