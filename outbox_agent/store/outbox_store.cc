#include "outbox_agent/store/outbox_store.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/base/big_endian.h"
#include "common/base/log.h"
#include "common/base/status.h"
#include "outbox_agent/store/outbox_layout.h"

namespace eonce {

using outbox_layout::DueAt;
using outbox_layout::kCredentialKey;
using outbox_layout::kDueCf;
using outbox_layout::kInlinePayloadBytes;
using outbox_layout::kLanesCf;
using outbox_layout::kMetaCf;
using outbox_layout::kPayloadsCf;
using outbox_layout::kRecordsCf;
using outbox_layout::kStatesCf;
using outbox_layout::StateKey;
using outbox_layout::Waiting;

std::string LaneOf(const OutboxRecord& record) {
  return absl::StrCat(record.command().entity().type(), "/", record.command().entity().id());
}

bool AwaitsOperator(const OutboxRecord& record) {
  return record.state() == v1::DEAD_LETTERED ||
         (record.state() == v1::EXPIRED && record.ever_sent());
}

bool ReleasesLane(const OutboxRecord& record) {
  return IsFinal(record.state()) && !AwaitsOperator(record);
}

std::vector<ColumnFamilySpec> OutboxStore::ColumnFamilies(Filters& filters) {
  ColumnFamilySpec records{kRecordsCf, {}};
  records.options.compaction_filter_factory = filters.factory;
  ColumnFamilySpec states{kStatesCf, {}};
  states.options.compaction_filter_factory = filters.factory;
  // Scanned: a state's records in enqueue order, and each lane's. A state's key is a byte
  // for the state, then the enqueue number: a record entering a state mostly goes to its
  // end, and the states' inserts interleave while the agent drains.
  states.lookups_miss = false;
  states.hint_tag_bytes = 1;
  ColumnFamilySpec lanes{kLanesCf, {}};
  lanes.lookups_miss = false;
  // Read for records kept apart from their payloads, which have an entry here. No
  // compaction filter: an entry is deleted by the transition that moves its payload back
  // into the record.
  ColumnFamilySpec payloads{kPayloadsCf, {}};
  payloads.lookups_miss = false;
  return {records, ColumnFamilySpec{kDueCf, {}}, states, lanes, ColumnFamilySpec{kMetaCf, {}},
          payloads};
}

OutboxStore::OutboxStore(RocksStore& store, Clock& clock, OutboxStoreOptions options)
    : store_(store), clock_(clock), options_(options) {
  for (auto& count : counts_) count = 0;
  std::unique_ptr<rocksdb::Iterator> it = store_.NewIterator(kStatesCf);
  uint64_t max_seq = 0;
  int64_t now = clock_.NowMs();
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    Framed framed;
    if (DecodeFramed(absl::string_view(it->value().data(), it->value().size()), &framed) &&
        framed.DroppedAt(now)) {
      continue;
    }
    int state = static_cast<unsigned char>(it->key()[0]);
    if (state < v1::OutboxState_ARRAYSIZE) counts_[state]++;
    max_seq = std::max(max_seq, ReadBigEndian64(absl::string_view(it->key().data() + 1, 8)));
  }
  next_seq_ = max_seq + 1;
  // The lanes, in memory: a key is the lane, a zero byte and the big-endian sequence.
  std::unique_ptr<rocksdb::Iterator> lanes = store_.NewIterator(kLanesCf);
  for (lanes->SeekToFirst(); lanes->Valid(); lanes->Next()) {
    absl::string_view key(lanes->key().data(), lanes->key().size());
    if (key.size() < 9) continue;
    lanes_.Add(std::string(key.substr(0, key.size() - 9)),
               ReadBigEndian64(key.substr(key.size() - 8)), lanes->value().ToString());
  }
  RebuildDue();
}

void OutboxStore::RebuildDue() {
  // The due column family of earlier versions is no longer read: empty it.
  std::unique_ptr<rocksdb::Iterator> old = store_.NewIterator(kDueCf);
  old->SeekToFirst();
  if (old->Valid()) {
    rocksdb::Status emptied = store_.db()->DeleteRange(
        rocksdb::WriteOptions(), store_.cf(kDueCf), old->key(), std::string(9, '\xff'));
    if (!emptied.ok()) LogError("could not empty the unused due column family",
                                {{"error", emptied.ToString()}});
  }
  // Each waiting record that heads its lane is due at its time.
  for (int state = 0; state < v1::OutboxState_ARRAYSIZE; ++state) {
    if (!Waiting(static_cast<OutboxState>(state))) continue;
    const std::string prefix(1, static_cast<char>(state));
    std::unique_ptr<rocksdb::Iterator> it = store_.NewIterator(kStatesCf);
    for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
      if (it->key().size() < 9) continue;
      const std::string id = it->key().ToString().substr(9);
      auto record = GetState(id);
      if (!record.ok() || !record->has_value()) continue;
      std::optional<int64_t> due = DueAt(**record);
      if (due.has_value() && IsLaneHead(**record)) due_.Set(id, *due);
    }
  }
}

int64_t OutboxStore::DropAt(const OutboxRecord& record) const {
  // What waits for an operator is never dropped by age.
  return ReleasesLane(record) ? record.updated_at_ms() + options_.forensic_retention_ms : 0;
}

std::string OutboxStore::Encode(const OutboxRecord& record) const {
  return EncodeFramed(DropAt(record), 0, record.SerializeAsString());
}

absl::StatusOr<std::optional<std::string>> OutboxStore::ReadPayload(
    const std::string& command_id) {
  std::string payload;
  rocksdb::Status status = store_.Get(kPayloadsCf, command_id, &payload);
  if (status.IsNotFound()) return std::optional<std::string>();
  EONCE_RETURN_IF_ERROR(FromRocks(status, "read outbox payload"));
  return std::optional<std::string>(std::move(payload));
}

std::optional<std::string> OutboxStore::MovePayloadOut(const std::string& command_id,
                                                       OutboxRecord* record,
                                                       rocksdb::WriteBatch* batch) {
  if (record->command().request().size() <= kInlinePayloadBytes) return std::nullopt;
  std::string payload = std::move(*record->mutable_command()->mutable_request());
  record->mutable_command()->clear_request();
  batch->Put(store_.cf(kPayloadsCf), command_id, payload);
  return payload;
}

absl::StatusOr<std::optional<OutboxRecord>> OutboxStore::Get(const std::string& command_id) {
  EONCE_ASSIGN_OR_RETURN(std::optional<OutboxRecord> record, GetState(command_id));
  if (record.has_value() && record->command().request().empty()) {
    EONCE_ASSIGN_OR_RETURN(std::optional<std::string> payload, ReadPayload(command_id));
    if (payload.has_value()) record->mutable_command()->set_request(*std::move(payload));
  }
  return record;
}

absl::StatusOr<std::optional<OutboxRecord>> OutboxStore::GetState(
    const std::string& command_id) {
  std::string value;
  rocksdb::Status status = store_.Get(kRecordsCf, command_id, &value);
  if (status.IsNotFound()) return std::optional<OutboxRecord>();
  EONCE_RETURN_IF_ERROR(FromRocks(status, "read outbox record"));
  Framed framed;
  OutboxRecord record;
  if (!ParseFramed(value, &record, &framed)) {
    return Error(absl::StatusCode::kDataLoss, "STORE_CORRUPT", "undecodable outbox record");
  }
  if (framed.DroppedAt(clock_.NowMs())) return std::optional<OutboxRecord>();
  return std::optional<OutboxRecord>(std::move(record));
}

std::optional<std::string> OutboxStore::NextInLane(const OutboxRecord& record) const {
  return lanes_.FirstOther(LaneOf(record), record.enqueue_seq());
}

bool OutboxStore::IsLaneHead(const OutboxRecord& record) const {
  return lanes_.IsHead(LaneOf(record), record.enqueue_seq());
}

void OutboxStore::AddIndexes(rocksdb::WriteBatch* batch, const OutboxRecord* before,
                             const OutboxRecord& after) {
  if (before != nullptr) {
    batch->Delete(store_.cf(kStatesCf), StateKey(before->state(), *before));
  }
  // Framed like the record, so the entry goes with it.
  batch->Put(store_.cf(kStatesCf), StateKey(after.state(), after),
             EncodeFramed(DropAt(after), 0, ""));
}

int64_t OutboxStore::WaitingCount() const {
  int64_t waiting = 0;
  for (int s = 0; s < v1::OutboxState_ARRAYSIZE; ++s) {
    if (Waiting(static_cast<OutboxState>(s))) waiting += counts_[s].load();
  }
  return waiting;
}

absl::StatusOr<std::optional<std::pair<std::string, int64_t>>> OutboxStore::NextDue(
    const OutboxRecord& record) {
  std::optional<std::string> next_id = NextInLane(record);
  if (!next_id.has_value()) return std::nullopt;
  // The next one may still be on its way to the store: it is due once durable.
  EONCE_ASSIGN_OR_RETURN(auto next, GetIncludingPending(*next_id));
  std::optional<int64_t> due = next.has_value() ? DueAt(*next) : std::nullopt;
  if (!due.has_value()) return std::nullopt;
  return std::make_pair(std::move(*next_id), *due);
}

absl::StatusOr<std::optional<OutboxRecord>> OutboxStore::GetIncludingPending(
    const std::string& command_id) {
  {
    absl::MutexLock lock(&pending_mu_);
    if (auto it = pending_.find(command_id); it != pending_.end()) {
      return std::optional<OutboxRecord>(it->second.record);
    }
  }
  return GetState(command_id);
}

void OutboxStore::MarkDurable(const std::string& command_id) { due_.Release(command_id); }

absl::StatusOr<int> OutboxStore::RecoverAfterRestart() {
  int recovered = 0;
  for (OutboxState state : {v1::CLAIMED, v1::SENDING}) {
    while (true) {
      EONCE_ASSIGN_OR_RETURN(auto batch, List(state, "", 1000));
      if (batch.empty()) break;
      for (const OutboxRecord& record : batch) {
        auto moved = Mutate(
            record.command().command_id(), "restart: the outcome of the last attempt is unknown",
            [&](OutboxRecord* r) {
              r->set_state(v1::UNKNOWN);
              r->set_ever_sent(true);  // the lost worker may have sent it
              r->clear_claim();
              r->set_next_attempt_at_ms(clock_.NowMs());
              return absl::OkStatus();
            },
            /*sync=*/false);
        if (!moved.ok()) return moved.status();
        ++recovered;
      }
    }
  }
  return recovered;
}

absl::Status OutboxStore::SaveCredential(int64_t epoch, bool revoked) {
  rocksdb::WriteBatch batch;
  batch.Put(store_.cf(kMetaCf), kCredentialKey,
            BigEndian64(static_cast<uint64_t>(epoch)) + (revoked ? "1" : "0"));
  // Synced: a revocation must survive a crash.
  return store_.Write(&batch, /*sync=*/true, "save credential");
}

absl::StatusOr<std::pair<int64_t, bool>> OutboxStore::LoadCredential() {
  std::string value;
  rocksdb::Status status = store_.Get(kMetaCf, kCredentialKey, &value);
  if (status.IsNotFound()) return std::make_pair<int64_t, bool>(0, false);
  EONCE_RETURN_IF_ERROR(FromRocks(status, "load credential"));
  if (value.size() != 9) {
    return Error(absl::StatusCode::kDataLoss, "STORE_CORRUPT", "undecodable credential");
  }
  return std::make_pair(static_cast<int64_t>(ReadBigEndian64(value)), value[8] == '1');
}

absl::Status OutboxStore::CompactAll() {
  for (const char* name : {kRecordsCf, kDueCf, kStatesCf, kLanesCf, kPayloadsCf}) {
    EONCE_RETURN_IF_ERROR(store_.FlushAndCompact(name));
  }
  return absl::OkStatus();
}

}  // namespace eonce
