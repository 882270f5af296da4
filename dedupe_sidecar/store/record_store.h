// RecordStore: the sidecar's idempotency records in RocksDB.
//
// A record is keyed by (tenant, idempotency key); the same key under another tenant is a
// different record. Column families:
//   records     the records, framed with their expiry (common/store/ttl.h)
//   by_command  (tenant, command id) -> idempotency key, for Reconcile by command id
//   parked      (tenant, key) of every parked record, for the operator's listing
//   meta        the retention promises (retention_promises.h)
// Retention: a finished record answers duplicates for `retention_ms`; then compaction
// (or a read) turns it into a tombstone (key, payload hash, outcome code) that lives
// until `forensic_retention_ms`. Started and parked records never expire: a live lease
// must keep blocking, and a parked record waits for an operator. Reads apply the same
// rules as the compaction filter, so behaviour never depends on when compaction ran.
//
// Each record's trim and drop times are stamped when it is written, so a lengthened
// retention does not reach records already stored. What GetInfo advertises (the
// retention agents send nothing older than, and the forensic retention) therefore stays
// at the old value until every record written under it has outlived the new one; a
// shortened one applies at once (RetentionPromises, kept across restarts).
//
// The records of commands finished recently are kept in memory too (FinishedAnswers,
// `finished_cache_bytes`; 0 for none): filled by the writes of finished records and by
// the reads that find one, emptied of a key by any other write or delete of it, read with
// the same retention rules.
//
// The store does no locking: the Deduper serializes writers of one key. Thread-safe for
// concurrent use on different keys. The RocksStore must outlive it. Get, Write and Delete
// are virtual only so that tests can break the store on purpose (negative_controls.h).
#ifndef EONCE_DEDUPE_SIDECAR_STORE_RECORD_STORE_H_
#define EONCE_DEDUPE_SIDECAR_STORE_RECORD_STORE_H_

#include <atomic>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/base/clock.h"
#include "common/store/rocks.h"
#include "common/store/ttl.h"
#include "dedupe_sidecar/store/finished_answers.h"
#include "dedupe_sidecar/store/retention_promises.h"
#include "eonce/internal/records.pb.h"
#include "rocksdb/write_batch.h"

namespace eonce {

using Record = internal::IdempotencyRecord;

// Committed or failed: the record holds an answer that duplicates are given.
bool IsFinished(const Record& record);

// Turns an expired record into its tombstone; used by the compaction filter.
class RecordTrimmer : public Trimmer {
 public:
  bool Trim(absl::string_view payload, std::string* trimmed) override;
};

// The compaction-filter plumbing a RecordStore's column families need; it must outlive
// the RocksStore they are opened in.
struct RecordStoreFilters {
  explicit RecordStoreFilters(Clock& clock);
  RecordTrimmer trimmer;
  TtlStats stats;
  std::shared_ptr<TtlCompactionFilterFactory> records_filter;
  std::shared_ptr<TtlCompactionFilterFactory> drop_only_filter;
};

class RecordStore {
 public:
  static std::vector<ColumnFamilySpec> ColumnFamilies(RecordStoreFilters& filters);

  RecordStore(RocksStore& store, Clock& clock, const RetentionOptions& retention,
              size_t finished_cache_bytes = FinishedAnswers::kDefaultMaxBytes);
  virtual ~RecordStore() = default;

  // The record of (tenant, key) as it stands now: absent once dropped, a tombstone once
  // trimmed.
  virtual absl::StatusOr<std::optional<Record>> Get(const std::string& tenant,
                                                    const std::string& key);
  // The idempotency key a command id was submitted under, within the tenant.
  absl::StatusOr<std::optional<std::string>> KeyOfCommand(const std::string& tenant,
                                                          const std::string& command_id);

  // One record to write, and the state it had (to maintain the parked index).
  struct RecordWrite {
    const Record* record;
    Record::State previous;
  };
  // Writes the records and their index entries in one batch: one RocksDB write, whose
  // records all land or none does. `sync` says whether the caller needs them on disk
  // before going on (a started record before forwarding, an outcome before answering).
  virtual absl::Status WriteMany(const std::vector<RecordWrite>& writes, bool sync);
  absl::Status Write(const Record& record, Record::State previous, bool sync) {
    return WriteMany({RecordWrite{&record, previous}}, sync);
  }
  // Calls `done` once every record written so far is on disk: at once, or from the store's
  // committer thread after the fsync that serves every call waiting then
  // (RocksStore::WhenDurable). The Deduper writes a record under its key's lock without a
  // sync, and forwards or answers from `done`, so no thread waits for a disk. `state` is
  // the state of the record waited for: virtual, with it, only so that a negative control
  // can skip the wait for some states.
  virtual void WhenDurable(Record::State state, RocksStore::DurableFn done);
  // Removes a record (nothing was applied, so the key is free again).
  virtual absl::Status Delete(const Record& record, bool sync);
  // Fencing: whether `token` still holds the record, i.e. it is a started record carrying
  // that token. A worker whose token no longer holds must not write the record.
  virtual bool HeldBy(const std::optional<Record>& record, uint64_t token) const;

  absl::StatusOr<std::vector<Record>> ListParked(const std::string& tenant, int limit);
  int64_t parked_count() const { return parked_count_.load(); }

  // Sharding: a page of the records whose slot is in [first, last], in key order after
  // `after` (a scoped key; "" for the first page), at most `limit` records and
  // `max_bytes` of them (at least one), after at most kMaxScannedPerPage entries.
  struct SlotPage {
    std::vector<Record> records;
    std::string next_after;  // where the next page starts; "" once the scan is complete
    int64_t unplaced = 0;    // records scanned that name no entity (their slot is unknown)
  };
  static constexpr int kMaxScannedPerPage = 100'000;
  absl::StatusOr<SlotPage> ExportSlots(uint32_t first, uint32_t last, const std::string& after,
                                       int limit, size_t max_bytes);
  // Writes records copied from another shard, with their index entries, in one synced
  // batch. Each keeps its own times, so its retention runs on from where it was.
  absl::Status Import(const std::vector<Record>& records);
  // Deletes every record of slots [first, last] and its index entries; synced. Returns
  // how many records went.
  absl::StatusOr<int64_t> DropSlots(uint32_t first, uint32_t last);

  // Forces compaction of every column family (tests, and the periodic reclaimer).
  absl::Status CompactAll();
  // Reads the records into the block cache, in key order, until the cache is 7/8 full or
  // `stop()` says so (RocksStore::WarmCache). Returns the bytes the cache holds after.
  absl::StatusOr<size_t> WarmCache(const std::function<bool()>& stop);
  RocksStore& rocks() { return store_; }
  // Reconciles the configured retentions with the stored promises; called once at start,
  // before anything is served. Synced.
  absl::Status SettleRetention() { return promises_.Settle(); }
  // The retention that holds for every stored record now (GetInfo's retention_ms).
  int64_t advertised_retention_ms() { return promises_.retention().advertised_ms(); }
  // The stored promises as they stand now: the retention's, and the forensic retention's
  // (GetInfo's forensic_retention_ms is its advertised value).
  internal::RetentionPromise retention_promise() { return promises_.retention(); }
  internal::RetentionPromise forensic_promise() { return promises_.forensic(); }
  const FinishedAnswers& finished_answers() const { return finished_; }
  int64_t retention_ms() const { return retention_.retention_ms; }
  int64_t forensic_retention_ms() const { return retention_.forensic_retention_ms; }

 private:
  // The drop and trim times a record is stored with (common/store/ttl.h).
  Framed TimesOf(const Record& record) const;
  // `record`, stored with `times`, as a read at `now` sees it: absent once dropped, a
  // tombstone once trimmed.
  static std::optional<Record> AsOf(Record record, const Framed& times, int64_t now_ms);
  // Adds `record` and its command-id index entry to `batch`; returns the record as it is
  // stored there (its bytes and times), for the finished answers.
  FinishedAnswers::Stored PutRecord(const Record& record, rocksdb::WriteBatch* batch) const;

  RocksStore& store_;
  Clock& clock_;
  const RetentionOptions retention_;
  FinishedAnswers finished_;
  std::atomic<int64_t> parked_count_{0};
  RetentionPromises promises_;
};

// The slot of a record (its tenant and entity); nullopt for one that names no entity.
std::optional<uint32_t> SlotOfRecord(const Record& record);

// (tenant, key) as a RocksDB key; tenant names never contain NUL.
std::string ScopedKey(const std::string& tenant, const std::string& key);

}  // namespace eonce

#endif  // EONCE_DEDUPE_SIDECAR_STORE_RECORD_STORE_H_
