#include "dedupe_sidecar/store/record_store.h"

#include <algorithm>
#include <functional>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/coord/slots.h"
#include "common/base/status.h"

namespace eonce {
namespace {

constexpr char kRecordsCf[] = "records";
constexpr char kByCommandCf[] = "by_command";
constexpr char kParkedCf[] = "parked";
constexpr char kMetaCf[] = "meta";

void MakeTombstone(Record* record) {
  record->set_tombstone(true);
  record->mutable_result()->clear_response();
  record->mutable_result()->clear_error_details();
  record->mutable_result()->clear_message();
  record->clear_lease_owner();
  record->clear_actor();
}

// Brackets the store writes of some keys in the finished answers (BeginWrite, EndWrite):
// every key begun is ended, keeping nothing, at EndAll or when the scope ends.
class KeyWrites {
 public:
  explicit KeyWrites(FinishedAnswers& answers) : answers_(answers) {}
  KeyWrites(const KeyWrites&) = delete;
  KeyWrites& operator=(const KeyWrites&) = delete;
  ~KeyWrites() { EndAll(); }

  void Begin(std::string scoped_key) {
    answers_.BeginWrite(scoped_key);
    keys_.push_back(std::move(scoped_key));
  }
  // Ends every key begun; the i-th keeps `(*kept)[i]` in memory, if given and set.
  void EndAll(std::vector<std::optional<FinishedAnswers::Stored>>* kept = nullptr) {
    for (size_t i = 0; i < keys_.size(); ++i) {
      const bool keep = kept != nullptr && i < kept->size() && (*kept)[i].has_value();
      answers_.EndWrite(keys_[i], keep ? &*(*kept)[i] : nullptr);
    }
    keys_.clear();
  }

 private:
  FinishedAnswers& answers_;
  std::vector<std::string> keys_;
};

}  // namespace

bool IsFinished(const Record& record) {
  return record.state() == Record::COMMITTED || record.state() == Record::FAILED;
}

std::string ScopedKey(const std::string& tenant, const std::string& key) {
  return absl::StrCat(tenant, std::string(1, '\0'), key);
}

bool RecordTrimmer::Trim(absl::string_view payload, std::string* trimmed) {
  Record record;
  if (!record.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) return false;
  if (!IsFinished(record) || record.tombstone()) return false;
  MakeTombstone(&record);
  *trimmed = record.SerializeAsString();
  return true;
}

RecordStoreFilters::RecordStoreFilters(Clock& clock)
    : records_filter(std::make_shared<TtlCompactionFilterFactory>(clock, &trimmer, stats)),
      drop_only_filter(std::make_shared<TtlCompactionFilterFactory>(clock, nullptr, stats)) {}

std::vector<ColumnFamilySpec> RecordStore::ColumnFamilies(RecordStoreFilters& filters) {
  ColumnFamilySpec records{kRecordsCf, {}};
  records.options.compaction_filter_factory = filters.records_filter;
  ColumnFamilySpec by_command{kByCommandCf, {}};
  by_command.options.compaction_filter_factory = filters.drop_only_filter;
  ColumnFamilySpec parked{kParkedCf, {}};
  return {records, by_command, parked, ColumnFamilySpec{kMetaCf, {}}};
}

RecordStore::RecordStore(RocksStore& store, Clock& clock, const RetentionOptions& retention,
                         size_t finished_cache_bytes)
    : store_(store),
      clock_(clock),
      retention_(retention),
      finished_(finished_cache_bytes),
      promises_(store, clock, kMetaCf, retention) {
  std::unique_ptr<rocksdb::Iterator> it = store_.NewIterator(kParkedCf);
  int64_t parked = 0;
  for (it->SeekToFirst(); it->Valid(); it->Next()) ++parked;
  parked_count_ = parked;
}

Framed RecordStore::TimesOf(const Record& record) const {
  Framed times;
  if (IsFinished(record)) {
    times.drop_at_ms = record.updated_ms() + retention_.forensic_retention_ms;
    if (!record.tombstone()) times.trim_at_ms = record.updated_ms() + retention_.retention_ms;
  }
  return times;
}

std::optional<Record> RecordStore::AsOf(Record record, const Framed& times, int64_t now_ms) {
  if (times.DroppedAt(now_ms)) return std::nullopt;
  if (times.TrimmedAt(now_ms) && IsFinished(record)) MakeTombstone(&record);
  return record;
}

absl::StatusOr<std::optional<Record>> RecordStore::Get(const std::string& tenant,
                                                       const std::string& key) {
  const std::string scoped = ScopedKey(tenant, key);
  FinishedAnswers::Entry cached;
  FinishedAnswers::Ticket ticket;
  if (finished_.Get(scoped, &cached, &ticket)) {
    return AsOf(std::move(cached.record), Framed{cached.drop_at_ms, cached.trim_at_ms, {}},
                clock_.NowMs());
  }
  std::string value;
  rocksdb::Status status = store_.Get(kRecordsCf, scoped, &value);
  if (status.IsNotFound()) return std::optional<Record>();
  EONCE_RETURN_IF_ERROR(FromRocks(status, "read record"));
  Framed framed;
  Record record;
  if (!ParseFramed(value, &record, &framed)) {
    return Error(absl::StatusCode::kDataLoss, "STORE_CORRUPT", "undecodable record");
  }
  const int64_t now = clock_.NowMs();
  if (ticket.admitted && IsFinished(record) && !framed.DroppedAt(now)) {
    finished_.Fill(scoped,
                   FinishedAnswers::Stored{std::string(framed.payload), framed.drop_at_ms,
                                           framed.trim_at_ms},
                   ticket);
  }
  return AsOf(std::move(record), framed, now);
}

absl::StatusOr<std::optional<std::string>> RecordStore::KeyOfCommand(
    const std::string& tenant, const std::string& command_id) {
  std::string value;
  rocksdb::Status status = store_.Get(kByCommandCf, ScopedKey(tenant, command_id), &value);
  if (status.IsNotFound()) return std::optional<std::string>();
  EONCE_RETURN_IF_ERROR(FromRocks(status, "read command index"));
  Framed framed;
  if (!DecodeFramed(value, &framed)) {
    return Error(absl::StatusCode::kDataLoss, "STORE_CORRUPT", "undecodable index entry");
  }
  if (framed.DroppedAt(clock_.NowMs())) return std::optional<std::string>();
  return std::optional<std::string>(std::string(framed.payload));
}

FinishedAnswers::Stored RecordStore::PutRecord(const Record& record,
                                               rocksdb::WriteBatch* batch) const {
  Framed times = TimesOf(record);
  FinishedAnswers::Stored stored{record.SerializeAsString(), times.drop_at_ms,
                                 times.trim_at_ms};
  batch->Put(store_.cf(kRecordsCf), ScopedKey(record.tenant(), record.idempotency_key()),
             EncodeFramed(times.drop_at_ms, times.trim_at_ms, stored.record));
  if (!record.command_id().empty()) {
    batch->Put(store_.cf(kByCommandCf), ScopedKey(record.tenant(), record.command_id()),
               EncodeFramed(times.drop_at_ms, 0, record.idempotency_key()));
  }
  return stored;
}

absl::Status RecordStore::WriteMany(const std::vector<RecordWrite>& writes, bool sync) {
  rocksdb::WriteBatch batch;
  int64_t parked_change = 0;
  // Out of memory until the write has ended: should it fail, the next read goes to the
  // store.
  KeyWrites writing(finished_);
  // What each write leaves in memory once it has ended: a finished record, as stored.
  std::vector<std::optional<FinishedAnswers::Stored>> kept(writes.size());
  for (size_t i = 0; i < writes.size(); ++i) {
    const RecordWrite& write = writes[i];
    const Record& record = *write.record;
    writing.Begin(ScopedKey(record.tenant(), record.idempotency_key()));
    FinishedAnswers::Stored stored = PutRecord(record, &batch);
    if (IsFinished(record)) kept[i] = std::move(stored);
    const bool parked_now = record.state() == Record::PARKED;
    const bool parked_before = write.previous == Record::PARKED;
    if (parked_now == parked_before) continue;
    const std::string scoped = ScopedKey(record.tenant(), record.idempotency_key());
    if (parked_now) {
      batch.Put(store_.cf(kParkedCf), scoped, "");
    } else {
      batch.Delete(store_.cf(kParkedCf), scoped);
    }
    parked_change += parked_now ? 1 : -1;
  }
  EONCE_RETURN_IF_ERROR(store_.Write(&batch, sync,
                                     writes.size() == 1 ? "write record" : "write records"));
  writing.EndAll(&kept);
  if (parked_change != 0) parked_count_.fetch_add(parked_change);
  return absl::OkStatus();
}

void RecordStore::WhenDurable(Record::State /*state*/, RocksStore::DurableFn done) {
  store_.WhenDurable(std::move(done));
}

bool RecordStore::HeldBy(const std::optional<Record>& record, uint64_t token) const {
  return record.has_value() && record->state() == Record::STARTED &&
         record->fencing_token() == token;
}

absl::Status RecordStore::Delete(const Record& record, bool sync) {
  rocksdb::WriteBatch batch;
  std::string scoped = ScopedKey(record.tenant(), record.idempotency_key());
  KeyWrites writing(finished_);
  writing.Begin(scoped);
  batch.Delete(store_.cf(kRecordsCf), scoped);
  if (!record.command_id().empty()) {
    batch.Delete(store_.cf(kByCommandCf), ScopedKey(record.tenant(), record.command_id()));
  }
  if (record.state() == Record::PARKED) batch.Delete(store_.cf(kParkedCf), scoped);
  EONCE_RETURN_IF_ERROR(store_.Write(&batch, sync, "delete record"));
  if (record.state() == Record::PARKED) parked_count_.fetch_sub(1);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Record>> RecordStore::ListParked(const std::string& tenant,
                                                            int limit) {
  limit = std::clamp(limit <= 0 ? 100 : limit, 1, 1000);
  std::vector<Record> out;
  std::string prefix = ScopedKey(tenant, "");
  std::unique_ptr<rocksdb::Iterator> it = store_.NewIterator(kParkedCf);
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix) &&
                         static_cast<int>(out.size()) < limit;
       it->Next()) {
    std::string key = it->key().ToString().substr(prefix.size());
    EONCE_ASSIGN_OR_RETURN(auto record, Get(tenant, key));
    if (record.has_value()) out.push_back(std::move(*record));
  }
  EONCE_RETURN_IF_ERROR(FromRocks(it->status(), "list parked"));
  return out;
}

std::optional<uint32_t> SlotOfRecord(const Record& record) {
  if (record.entity().type().empty() || record.entity().id().empty()) return std::nullopt;
  return SlotOf(record.tenant(), record.entity().type(), record.entity().id());
}

absl::StatusOr<RecordStore::SlotPage> RecordStore::ExportSlots(uint32_t first, uint32_t last,
                                                               const std::string& after,
                                                               int limit, size_t max_bytes) {
  SlotPage page;
  size_t bytes = 0;
  int scanned = 0;
  const int64_t now = clock_.NowMs();
  std::unique_ptr<rocksdb::Iterator> it = store_.NewIterator(kRecordsCf);
  after.empty() ? it->SeekToFirst() : it->Seek(after);
  if (!after.empty() && it->Valid() && it->key() == rocksdb::Slice(after)) it->Next();
  for (; it->Valid(); it->Next()) {
    if (scanned == kMaxScannedPerPage || static_cast<int>(page.records.size()) == limit ||
        (bytes >= max_bytes && !page.records.empty())) {
      return page;  // next_after: the last entry looked at, kept or not
    }
    ++scanned;
    page.next_after = it->key().ToString();
    Framed framed;
    Record record;
    if (!ParseFramed(it->value().ToString(), &record, &framed)) {
      return Error(absl::StatusCode::kDataLoss, "STORE_CORRUPT", "undecodable record");
    }
    if (framed.DroppedAt(now)) continue;
    std::optional<uint32_t> slot = SlotOfRecord(record);
    if (!slot.has_value()) {
      ++page.unplaced;
      continue;
    }
    if (*slot < first || *slot > last) continue;
    if (framed.TrimmedAt(now) && IsFinished(record)) MakeTombstone(&record);
    bytes += record.ByteSizeLong();
    page.records.push_back(std::move(record));
  }
  EONCE_RETURN_IF_ERROR(FromRocks(it->status(), "export records"));
  page.next_after.clear();  // the scan is complete
  return page;
}

absl::Status RecordStore::Import(const std::vector<Record>& records) {
  rocksdb::WriteBatch batch;
  int64_t parked = 0;
  KeyWrites writing(finished_);
  for (const Record& record : records) {
    std::string scoped = ScopedKey(record.tenant(), record.idempotency_key());
    writing.Begin(scoped);
    PutRecord(record, &batch);
    if (record.state() == Record::PARKED) {
      std::string present;
      if (store_.Get(kParkedCf, scoped, &present).IsNotFound()) ++parked;
      batch.Put(store_.cf(kParkedCf), scoped, "");
    }
  }
  EONCE_RETURN_IF_ERROR(store_.Write(&batch, /*sync=*/true, "import records"));
  parked_count_.fetch_add(parked);
  return absl::OkStatus();
}

absl::StatusOr<int64_t> RecordStore::DropSlots(uint32_t first, uint32_t last) {
  constexpr int kDeletesPerBatch = 10'000;
  int64_t dropped = 0;
  int64_t parked = 0;
  rocksdb::WriteBatch batch;
  KeyWrites writing(finished_);  // the keys of the batch being built
  std::unique_ptr<rocksdb::Iterator> it = store_.NewIterator(kRecordsCf);
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    Framed framed;
    Record record;
    if (!ParseFramed(it->value().ToString(), &record, &framed)) {
      return Error(absl::StatusCode::kDataLoss, "STORE_CORRUPT", "undecodable record");
    }
    std::optional<uint32_t> slot = SlotOfRecord(record);
    if (!slot.has_value() || *slot < first || *slot > last) continue;
    writing.Begin(it->key().ToString());
    batch.Delete(store_.cf(kRecordsCf), it->key());
    if (!record.command_id().empty()) {
      batch.Delete(store_.cf(kByCommandCf), ScopedKey(record.tenant(), record.command_id()));
    }
    if (record.state() == Record::PARKED) {
      batch.Delete(store_.cf(kParkedCf), it->key());
      ++parked;
    }
    if (++dropped % kDeletesPerBatch == 0) {
      EONCE_RETURN_IF_ERROR(store_.Write(&batch, /*sync=*/false, "drop records"));
      batch.Clear();
      writing.EndAll();
    }
  }
  EONCE_RETURN_IF_ERROR(FromRocks(it->status(), "drop records"));
  EONCE_RETURN_IF_ERROR(store_.Write(&batch, /*sync=*/true, "drop records"));
  parked_count_.fetch_sub(parked);
  return dropped;
}

absl::StatusOr<size_t> RecordStore::WarmCache(const std::function<bool()>& stop) {
  return store_.WarmCache(kRecordsCf, store_.block_cache_capacity() / 8 * 7, stop);
}

absl::Status RecordStore::CompactAll() {
  for (const char* name : {kRecordsCf, kByCommandCf, kParkedCf}) {
    EONCE_RETURN_IF_ERROR(store_.FlushAndCompact(name));
  }
  return absl::OkStatus();
}

}  // namespace eonce
