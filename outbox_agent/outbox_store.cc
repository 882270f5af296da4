#include "outbox_agent/outbox_store.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/big_endian.h"
#include "common/log.h"
#include "common/status.h"
#include "outbox_agent/outbox_layout.h"

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
using outbox_layout::LaneKey;
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

absl::StatusOr<OutboxStore::Inserted> OutboxStore::Insert(const v1::Command& command) {
  absl::Notification answered;
  absl::StatusOr<Inserted> result = absl::InternalError("no answer");
  InsertWhenDurable(command, [&](absl::StatusOr<Inserted> inserted) {
    result = std::move(inserted);
    answered.Notify();
  });
  answered.WaitForNotification();
  if (result.ok() && result->second) MarkDurable(command.command_id());
  return result;
}

void OutboxStore::InsertWhenDurable(const v1::Command& command, InsertFn done) {
  OutboxRecord record;
  *record.mutable_command() = command;
  const std::string id = command.command_id();
  const std::string lane = LaneOf(record);
  std::optional<OutboxRecord> found;  // the id's record, from an earlier Enqueue
  absl::Status refused;               // answered at once, once the locks are released
  rocksdb::WriteBatch batch;
  {
    StripedLocks::Guard guard = locks_.Lock({id, lane});
    {
      // Still on its way to the store: answered with it.
      absl::MutexLock lock(&pending_mu_);
      if (auto it = pending_.find(id); it != pending_.end()) found = it->second.record;
    }
    if (!found.has_value()) {
      absl::StatusOr<std::optional<OutboxRecord>> stored = Get(id);
      if (stored.ok()) {
        found = std::move(*stored);
      } else {
        refused = stored.status();
      }
    }
    if (!refused.ok()) {
      // answered below
    } else if (found.has_value()) {
      if (found->command().payload_hash().sha256() != command.payload_hash().sha256() ||
          found->command().target_method() != command.target_method()) {
        refused = Error(absl::StatusCode::kAlreadyExists, "COMMAND_ID_CONFLICT",
                        "this command id was enqueued with a different payload");
      } else {
        absl::MutexLock lock(&pending_mu_);
        if (auto it = pending_.find(id); it != pending_.end()) {
          it->second.followers.push_back(std::move(done));
          return;
        }
      }
    } else if (const int64_t waiting = WaitingCount();
               waiting >= options_.max_pending_records) {
      refused = WithErrorMetadata(
          WithRetryAfter(Error(absl::StatusCode::kResourceExhausted, "OUTBOX_FULL",
                               absl::StrCat("the outbox holds ", waiting,
                                            " waiting records (the limit)")),
                         kOutboxFullRetryAfterMs),
          "limit", absl::StrCat(options_.max_pending_records));
    } else {
      int64_t now = clock_.NowMs();
      record.set_state(v1::QUEUED);
      record.set_created_at_ms(now);
      record.set_updated_at_ms(now);
      record.set_next_attempt_at_ms(now);
      record.set_enqueue_seq(next_seq_.fetch_add(1));
      v1::Transition* t = record.add_history();
      t->set_to(v1::QUEUED);
      t->set_at_ms(now);
      t->set_why("enqueued");
      // A long payload apart from the record, which its transitions rewrite.
      std::optional<std::string> payload = MovePayloadOut(id, &record, &batch);
      batch.Put(store_.cf(kRecordsCf), id, Encode(record));
      if (payload.has_value()) record.mutable_command()->set_request(*std::move(payload));
      batch.Put(store_.cf(kLanesCf), LaneKey(record), id);
      AddIndexes(&batch, nullptr, record);
      // In memory at once, under the locks, as if written: only the head of a lane is due,
      // and nothing is due before MarkDurable (an attempt must never go out for a command
      // a crash can still take back, nor be announced before the command is).
      due_.Hold(id);
      if (!NextInLane(record).has_value()) due_.Set(id, now);
      lanes_.Add(lane, record.enqueue_seq(), id);
      counts_[v1::QUEUED]++;
      absl::MutexLock lock(&pending_mu_);
      pending_[id].record = record;
    }
  }
  if (!refused.ok()) return done(std::move(refused));
  if (found.has_value()) {
    // Written already: answered once it is durable (its own Enqueue may still wait).
    return store_.WhenDurable([found = std::move(*found), done = std::move(done)](
                                  absl::Status durable) mutable {
      if (!durable.ok()) return done(std::move(durable));
      done(Inserted{std::move(found), false});
    });
  }
  // Queued after the locks are released: inserts of one lane may reach the committer out
  // of order, which nothing reads (each has its own keys, and each is answered only once
  // its own batch is durable).
  store_.WriteWhenDurable(std::move(batch), "enqueue",
                          [this, record = std::move(record), done = std::move(done)](
                              absl::Status status, bool written) {
                            FinishInsert(record, std::move(status), written, done);
                          });
}

void OutboxStore::FinishInsert(const OutboxRecord& record, absl::Status status, bool written,
                               const InsertFn& done) {
  const std::string& id = record.command().command_id();
  std::vector<InsertFn> followers;
  auto take_pending = [&] {
    absl::MutexLock lock(&pending_mu_);
    if (auto it = pending_.find(id); it != pending_.end()) {
      followers = std::move(it->second.followers);
      pending_.erase(it);
    }
  };
  if (!status.ok() && !written) {
    // Never reached the store: the memory forgets it too, under the same locks. Had it
    // headed its lane, the next command of the lane heads it now (written meanwhile, its
    // batch queued after this one's).
    const std::string lane = LaneOf(record);
    StripedLocks::Guard guard = locks_.Lock({id, lane});
    if (IsLaneHead(record)) {
      if (auto next = NextDue(record); next.ok() && next->has_value()) {
        due_.Set((*next)->first, (*next)->second);
      }
    }
    due_.Remove(id);
    due_.Release(id);
    lanes_.Remove(lane, record.enqueue_seq());
    counts_[v1::QUEUED]--;
    take_pending();
  } else {
    take_pending();
  }
  if (!status.ok()) {
    done(status);
    for (const InsertFn& follower : followers) follower(status);
    return;
  }
  done(Inserted{record, true});
  for (const InsertFn& follower : followers) follower(Inserted{record, false});
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

absl::StatusOr<std::vector<std::string>> OutboxStore::Due(int64_t now_ms, int limit) {
  return due_.DueBy(now_ms, limit);
}

std::optional<int64_t> OutboxStore::NextDueMs() { return due_.Earliest(); }

size_t OutboxStore::ListLimit(int limit) {
  return static_cast<size_t>(std::clamp(limit <= 0 ? 100 : limit, 1, 1000));
}

absl::StatusOr<std::vector<OutboxRecord>> OutboxStore::List(OutboxState state,
                                                           const std::string& after,
                                                           int limit) {
  limit = static_cast<int>(ListLimit(limit));
  std::vector<OutboxRecord> out;
  std::vector<OutboxState> states;
  if (state == v1::OUTBOX_STATE_UNSPECIFIED) {
    for (int s = 1; s < v1::OutboxState_ARRAYSIZE; ++s) states.push_back(static_cast<OutboxState>(s));
  } else {
    states.push_back(state);
  }
  // Pages follow the states index: by state, then in enqueue order. A page resumes at
  // the record it ended on, so states before that record's state are done.
  std::string after_key;
  if (!after.empty()) {
    EONCE_ASSIGN_OR_RETURN(auto anchor, GetState(after));
    if (!anchor.has_value()) {
      return Error(absl::StatusCode::kFailedPrecondition, "LIST_ANCHOR_GONE",
                   absl::StrCat("after_command_id ", after,
                                " is no longer in the outbox; list again from the start"));
    }
    after_key = StateKey(anchor->state(), *anchor);
  }
  std::unique_ptr<rocksdb::Iterator> it = store_.NewIterator(kStatesCf);
  for (OutboxState s : states) {
    std::string prefix(1, static_cast<char>(s));
    if (!after_key.empty() &&
        static_cast<unsigned char>(prefix[0]) < static_cast<unsigned char>(after_key[0])) {
      continue;
    }
    it->Seek(after_key.empty() || after_key[0] != prefix[0] ? prefix : after_key);
    for (; it->Valid() && it->key().starts_with(prefix) && static_cast<int>(out.size()) < limit;
         it->Next()) {
      if (it->key().ToString() == after_key) continue;
      EONCE_ASSIGN_OR_RETURN(auto record, Get(it->key().ToString().substr(9)));
      if (record.has_value()) out.push_back(std::move(*record));
    }
    if (static_cast<int>(out.size()) >= limit) break;
  }
  EONCE_RETURN_IF_ERROR(FromRocks(it->status(), "list outbox"));
  return out;
}

std::array<int64_t, v1::OutboxState_ARRAYSIZE> OutboxStore::CountsByState() const {
  std::array<int64_t, v1::OutboxState_ARRAYSIZE> out{};
  for (int s = 0; s < v1::OutboxState_ARRAYSIZE; ++s) out[s] = counts_[s].load();
  return out;
}

absl::StatusOr<int64_t> OutboxStore::OldestWaitingAgeMs() {
  int64_t oldest = 0;
  std::unique_ptr<rocksdb::Iterator> it = store_.NewIterator(kStatesCf);
  for (int s = 1; s < v1::OutboxState_ARRAYSIZE; ++s) {
    if (!Waiting(static_cast<OutboxState>(s))) continue;
    std::string prefix(1, static_cast<char>(s));
    it->Seek(prefix);
    if (!it->Valid() || !it->key().starts_with(prefix)) continue;
    EONCE_ASSIGN_OR_RETURN(auto record, GetState(it->key().ToString().substr(9)));
    if (record.has_value()) {
      oldest = std::max(oldest, clock_.NowMs() - record->created_at_ms());
    }
  }
  EONCE_RETURN_IF_ERROR(FromRocks(it->status(), "oldest waiting"));
  return oldest;
}

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
