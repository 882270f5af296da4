#include "common/store/rocks.h"

#include <sys/statvfs.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "common/base/status.h"
#include "rocksdb/cache.h"
#include "rocksdb/filter_policy.h"
#include "rocksdb/memtablerep.h"
#include "rocksdb/slice_transform.h"
#include "rocksdb/table.h"

namespace eonce {
namespace {

class DiscardingLogger : public rocksdb::Logger {
 public:
  DiscardingLogger() : rocksdb::Logger(rocksdb::InfoLogLevel::FATAL_LEVEL) {}
  using rocksdb::Logger::Logv;
  void Logv(const char* /*format*/, va_list /*ap*/) override {}
};

}  // namespace

RocksStore::~RocksStore() { Close().IgnoreError(); }

absl::StatusOr<std::unique_ptr<RocksStore>> RocksStore::Open(
    const std::string& path, std::vector<ColumnFamilySpec> families,
    const StoreOptions& options) {
  rocksdb::Options db_options;
  db_options.create_if_missing = true;
  db_options.create_missing_column_families = true;
  db_options.max_open_files = 256;
  db_options.keep_log_file_num = 4;
  db_options.max_file_opening_threads = options.max_file_opening_threads;
  // A synced write flushes the buffer itself; so does AwaitDurable (FlushWAL).
  db_options.manual_wal_flush = options.buffer_log_until_sync;
  if (options.discard_info_log) {
    db_options.info_log = std::make_shared<DiscardingLogger>();
    // Nothing to dump the statistics to; no timer thread for it either.
    db_options.stats_dump_period_sec = 0;
    db_options.stats_persist_period_sec = 0;
  }
  if (options.env != nullptr) db_options.env = options.env;

  auto cache = rocksdb::NewLRUCache(options.block_cache_bytes);
  rocksdb::BlockBasedTableOptions table;
  table.block_cache = cache;
  // Point lookups dominate (is this key known?): a bloom filter answers "no" for a first
  // seen key without reading a data block, and a hash index inside each data block finds
  // the key in it. Index and filter blocks stay in the table readers' memory, out of the
  // block cache: there, with a working set larger than the cache, data blocks evicted
  // them and every lookup read and decompressed the whole index of its file again
  // (perf: 60% of the sidecar's cycles in memmove and snappy at a million records). They
  // cost about 2 MiB per million records.
  table.cache_index_and_filter_blocks = false;
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  table.data_block_index_type = rocksdb::BlockBasedTableOptions::kDataBlockBinaryAndHash;

  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
  families.insert(families.begin(), ColumnFamilySpec{rocksdb::kDefaultColumnFamilyName, {}});
  for (auto& family : families) {
    rocksdb::ColumnFamilyOptions cf_options = family.options;
    cf_options.write_buffer_size = options.write_buffer_bytes;
    cf_options.max_write_buffer_number = 3;
    // LZ4: the records' repeated strings shrink as well as with snappy (0.80x the raw
    // bytes at a million records), and a lookup that misses the cache decompresses its
    // block faster (sidecar duplicates at 1M records, `bench --only=large`: 13.7k/s with
    // snappy, 16.7k/s with LZ4).
    cf_options.compression = rocksdb::kLZ4Compression;
    cf_options.periodic_compaction_seconds = options.periodic_compaction_seconds;
    // A first-seen command's lookups miss (its inbox entry, its key's owner, its sidecar
    // record): a bloom filter over each memtable's keys answers them without a search of
    // the memtable's skiplist.
    if (family.lookups_miss) {
      cf_options.memtable_prefix_bloom_size_ratio = 0.02;
      cf_options.memtable_whole_key_filtering = true;
    }
    if (family.hint_tag_bytes.has_value()) {
      cf_options.memtable_insert_with_hint_prefix_extractor.reset(
          rocksdb::NewCappedPrefixTransform(*family.hint_tag_bytes));
    }
    if (family.unsorted_memtable) {
      cf_options.memtable_factory = std::make_shared<rocksdb::VectorRepFactory>();
      cf_options.write_buffer_size = kUnsortedWriteBufferBytes;
      db_options.allow_concurrent_memtable_write = false;
    }
    cf_options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
    descriptors.emplace_back(family.name, cf_options);
  }

  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status status = rocksdb::DB::Open(db_options, path, descriptors, &handles, &raw);
  if (!status.ok()) {
    if (status.IsIOError() && status.ToString().find("lock") != std::string::npos) {
      return Error(absl::StatusCode::kFailedPrecondition, "DATA_DIR_IN_USE",
                   absl::StrCat("data directory ", path,
                                " is in use by another process (", status.ToString(), ")"));
    }
    return FromRocks(status, absl::StrCat("open ", path));
  }
  std::unique_ptr<RocksStore> store(new RocksStore());
  store->db_.reset(raw);
  store->cache_ = cache;
  store->path_ = path;
  store->min_free_bytes_ = options.min_free_bytes;
  store->inline_durability_ = options.inline_durability;
  for (size_t i = 0; i < handles.size(); ++i) {
    store->handles_[descriptors[i].name] = handles[i];
  }
  // What the log held after a process crash may never have been synced: make it durable
  // now, so that everything a reader can see from here on is (AwaitDurable's promise).
  EONCE_RETURN_IF_ERROR(
      FromRocks(store->db_->FlushWAL(/*sync=*/true), absl::StrCat("sync ", path)));
  return store;
}

rocksdb::ColumnFamilyHandle* RocksStore::cf(const std::string& name) const {
  auto it = handles_.find(name);
  if (it == handles_.end()) {
    std::cerr << "eonce: no column family named " << name << "\n";
    std::abort();
  }
  return it->second;
}

absl::Status RocksStore::Close() {
  if (db_ == nullptr) return absl::OkStatus();
  StopCommitter();
  if (failed()) {
    // A failed store takes no writes, a flush included; the WAL holds what was acked.
    CloseWithoutFlush();
    return absl::UnavailableError("closed without flushing: the store had stopped taking writes");
  }
  absl::Status result;
  for (auto& [name, handle] : handles_) {
    rocksdb::Status flushed = db_->Flush(rocksdb::FlushOptions(), handle);
    if (!flushed.ok() && result.ok()) result = FromRocks(flushed, "flush " + name);
  }
  for (auto& [name, handle] : handles_) db_->DestroyColumnFamilyHandle(handle);
  handles_.clear();
  rocksdb::Status closed = db_->Close();
  if (!closed.ok() && result.ok()) result = FromRocks(closed, "close");
  db_.reset();
  return result;
}

rocksdb::Status RocksStore::Get(const std::string& family, const rocksdb::Slice& key,
                                std::string* value) {
  return db_->Get(rocksdb::ReadOptions(), cf(family), key, value);
}

absl::StatusOr<size_t> RocksStore::WarmCache(const std::string& family, size_t max_bytes,
                                             const std::function<bool()>& stop) {
  constexpr int kKeysBetweenLooks = 256;
  rocksdb::ReadOptions options;
  options.fill_cache = true;
  options.readahead_size = 2 << 20;  // one sequential pass over the files
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(options, cf(family)));
  int keys = 0;
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    if (++keys % kKeysBetweenLooks == 0 && (cache_->GetUsage() >= max_bytes || stop())) break;
  }
  EONCE_RETURN_IF_ERROR(FromRocks(it->status(), absl::StrCat("warm the cache with ", family)));
  return cache_->GetUsage();
}

std::unique_ptr<rocksdb::Iterator> RocksStore::NewIterator(const std::string& family,
                                                           const rocksdb::Snapshot* snapshot) {
  rocksdb::ReadOptions options;
  options.snapshot = snapshot;
  return std::unique_ptr<rocksdb::Iterator>(db_->NewIterator(options, cf(family)));
}

std::shared_ptr<const rocksdb::Snapshot> RocksStore::Snapshot() {
  rocksdb::DB* db = db_.get();
  return std::shared_ptr<const rocksdb::Snapshot>(
      db->GetSnapshot(), [db](const rocksdb::Snapshot* s) { db->ReleaseSnapshot(s); });
}

absl::Status RocksStore::FlushAndCompact(const std::string& family) {
  EONCE_RETURN_IF_ERROR(FromRocks(db_->Flush(rocksdb::FlushOptions(), cf(family)), "flush"));
  rocksdb::CompactRangeOptions options;
  options.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForce;
  return FromRocks(db_->CompactRange(options, cf(family), nullptr, nullptr), "compact");
}

absl::Status RocksStore::CheckWritable() const {
  if (failed()) {
    return Error(absl::StatusCode::kUnavailable, "STORE_FAILED",
                 "the store stopped taking writes after a failed write; restart to recover");
  }
  return CheckSpace();
}

absl::Status RocksStore::Write(rocksdb::WriteBatch* batch, bool sync, const char* what) {
  EONCE_RETURN_IF_ERROR(CheckWritable());
  absl::Status status =
      FromRocks(db_->Write(sync ? SyncedWrite() : UnsyncedWrite(), batch), what);
  if (!status.ok()) MarkFailed();
  return status;
}

absl::Status RocksStore::CheckSpace() const {
  if (min_free_bytes_ == 0) return absl::OkStatus();
  // With a wide margin above the reserve, one look serves the writes of the next
  // kSpaceLookReuse: no disk fills kSpaceLookMargin that fast, so none of them can reach
  // the reserve unseen. Near the reserve every write looks.
  const int64_t now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::steady_clock::now().time_since_epoch())
                             .count();
  if (now_ns < roomy_until_ns_.load(std::memory_order_relaxed)) return absl::OkStatus();
  space_looks_.fetch_add(1, std::memory_order_relaxed);
  struct statvfs fs;
  if (statvfs(path_.c_str(), &fs) != 0) return absl::OkStatus();  // the write will tell
  uint64_t free_bytes = static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
  const bool roomy = free_bytes >= min_free_bytes_ + kSpaceLookMargin;
  roomy_until_ns_.store(roomy ? now_ns + kSpaceLookReuse.count() : 0, std::memory_order_relaxed);
  if (free_bytes >= min_free_bytes_) return absl::OkStatus();
  return WithRetryAfter(
      Error(absl::StatusCode::kResourceExhausted, "STORE_FULL",
            absl::StrCat("the disk holding the store has ", free_bytes >> 20,
                         " MiB free, below the reserve of ", min_free_bytes_ >> 20,
                         " MiB; nothing was written, writes resume when space returns")),
      1000);
}

absl::Status RocksStore::ProbeWrite() {
  rocksdb::WriteBatch batch;
  batch.Put("eonce-health-probe", "ok");
  return Write(&batch, /*sync=*/true, "health probe");
}

void RocksStore::CloseWithoutFlush() {
  if (db_ == nullptr) return;
  StopCommitter();
  for (auto& [name, handle] : handles_) db_->DestroyColumnFamilyHandle(handle);
  handles_.clear();
  db_->Close().PermitUncheckedError();
  db_.reset();
}

uint64_t RocksStore::ApproximateBytes() {
  if (db_ == nullptr) return 0;
  uint64_t total = 0;
  for (auto& [name, handle] : handles_) {
    uint64_t value = 0;
    if (db_->GetIntProperty(handle, rocksdb::DB::Properties::kLiveSstFilesSize, &value)) {
      total += value;
    }
    if (db_->GetIntProperty(handle, rocksdb::DB::Properties::kCurSizeAllMemTables, &value)) {
      total += value;
    }
  }
  return total;
}

rocksdb::WriteOptions SyncedWrite() {
  rocksdb::WriteOptions options;
  options.sync = true;
  return options;
}

rocksdb::WriteOptions UnsyncedWrite() {
  rocksdb::WriteOptions options;
  options.sync = false;
  return options;
}

}  // namespace eonce
