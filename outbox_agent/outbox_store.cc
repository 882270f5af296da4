#include "outbox_agent/outbox_store.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/big_endian.h"
#include "common/log.h"
#include "common/status.h"

namespace eonce {
namespace {

constexpr char kRecordsCf[] = "records";
constexpr char kDueCf[] = "due";
constexpr char kStatesCf[] = "states";
constexpr char kLanesCf[] = "lanes";
constexpr char kMetaCf[] = "meta";
constexpr char kCredentialKey[] = "credential";

std::string LaneKey(const OutboxRecord& record) {
  return absl::StrCat(LaneOf(record), std::string(1, '\0'), BigEndian64(record.enqueue_seq()));
}

std::string StateKey(OutboxState state, const OutboxRecord& record) {
  return absl::StrCat(std::string(1, static_cast<char>(state)), BigEndian64(record.enqueue_seq()),
                      record.command().command_id());
}

// When a record in `state` is due, if it is: waiting records at their next attempt,
// claimed ones when their claim runs out (so a dead worker's record is taken over).
std::optional<int64_t> DueAt(const OutboxRecord& record) {
  switch (record.state()) {
    case v1::QUEUED:
    case v1::RETRYABLE_FAILED:
    case v1::UNKNOWN:
      return record.next_attempt_at_ms();
    case v1::CLAIMED:
    case v1::SENDING:
      return record.claim().expires_at_ms();
    default:
      return std::nullopt;
  }
}

bool Waiting(OutboxState state) {
  return state == v1::QUEUED || state == v1::RETRYABLE_FAILED || state == v1::UNKNOWN ||
         state == v1::CLAIMED || state == v1::SENDING;
}

}  // namespace

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
  return {records, ColumnFamilySpec{kDueCf, {}}, states,
          ColumnFamilySpec{kLanesCf, {}}, ColumnFamilySpec{kMetaCf, {}}};
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
      auto record = Get(id);
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

absl::StatusOr<std::optional<OutboxRecord>> OutboxStore::Get(const std::string& command_id) {
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
      batch.Put(store_.cf(kRecordsCf), id, Encode(record));
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
  return Get(command_id);
}

void OutboxStore::MarkDurable(const std::string& command_id) { due_.Release(command_id); }

absl::StatusOr<OutboxRecord> OutboxStore::Mutate(const std::string& command_id,
                                                 const std::string& why,
                                                 const ChangeFn& change, bool sync) {
  std::vector<absl::StatusOr<OutboxRecord>> moved = MutateMany({{command_id, why, change}});
  // A synced transition is durable before the caller goes on; awaited after the locks are
  // released, so transitions share their fsyncs.
  if (sync && moved[0].ok()) EONCE_RETURN_IF_ERROR(store_.AwaitDurable());
  return std::move(moved[0]);
}

absl::StatusOr<std::string> OutboxStore::LaneToLock(const std::string& command_id) {
  // A command's entity never changes, so the index's answer holds even if the entry goes
  // meanwhile; a record without an entry is read for it.
  if (std::optional<std::string> lane = lanes_.LaneOf(command_id); lane.has_value()) {
    return *std::move(lane);
  }
  EONCE_ASSIGN_OR_RETURN(auto peek, Get(command_id));
  if (!peek.has_value()) {
    return Error(absl::StatusCode::kNotFound, "NO_SUCH_COMMAND",
                 absl::StrCat("no outbox record ", command_id));
  }
  return LaneOf(*peek);
}

std::vector<absl::StatusOr<OutboxRecord>> OutboxStore::MutateMany(
    const std::vector<Change>& changes) {
  std::vector<absl::StatusOr<OutboxRecord>> results(
      changes.size(), absl::StatusOr<OutboxRecord>(absl::InternalError("not reached")));
  size_t next = 0;
  while (next < changes.size()) {
    // A group: the following changes of distinct commands and lanes. A change of a command
    // or lane already in the group starts the next group, so it reads what this one wrote
    // (the next command of a released lane, its own earlier change), as one Mutate after
    // another would.
    std::vector<size_t> group;
    std::vector<std::string> lanes;
    absl::flat_hash_set<absl::string_view> taken;
    for (; next < changes.size(); ++next) {
      const std::string& id = changes[next].command_id;
      absl::StatusOr<std::string> lane = LaneToLock(id);
      if (!lane.ok()) {
        results[next] = lane.status();
        continue;
      }
      if (taken.contains(id) || taken.contains(*lane)) break;
      lanes.push_back(*std::move(lane));
      group.push_back(next);
      taken.insert(id);
      taken.insert(lanes.back());
    }
    std::vector<absl::string_view> keys;
    for (size_t g = 0; g < group.size(); ++g) {
      keys.push_back(changes[group[g]].command_id);
      keys.push_back(lanes[g]);
    }
    StripedLocks::Guard guard = locks_.Lock(keys);
    rocksdb::WriteBatch batch;
    std::vector<std::pair<size_t, Prepared>> prepared;
    for (size_t k : group) {
      absl::StatusOr<Prepared> p = PrepareLocked(changes[k], &batch);
      if (p.ok()) {
        prepared.emplace_back(k, *std::move(p));
      } else {
        results[k] = p.status();
      }
    }
    if (prepared.empty()) continue;
    if (absl::Status written = store_.Write(&batch, /*sync=*/false, "outbox transition");
        !written.ok()) {
      for (const auto& [k, p] : prepared) results[k] = written;
      continue;
    }
    for (auto& [k, p] : prepared) {
      ApplyWritten(changes[k].command_id, p);
      results[k] = std::move(p.after);
    }
  }
  return results;
}

absl::StatusOr<OutboxStore::Prepared> OutboxStore::PrepareLocked(const Change& c,
                                                                 rocksdb::WriteBatch* batch) {
  EONCE_ASSIGN_OR_RETURN(auto before, Get(c.command_id));
  if (!before.has_value()) {
    return Error(absl::StatusCode::kNotFound, "NO_SUCH_COMMAND",
                 absl::StrCat("no outbox record ", c.command_id));
  }
  Prepared p;
  p.before_state = before->state();
  p.after = *before;
  OutboxRecord& after = p.after;
  EONCE_RETURN_IF_ERROR(c.change(&after));
  int64_t now = clock_.NowMs();
  after.set_updated_at_ms(now);
  if (after.state() != before->state()) {
    v1::Transition* t = after.add_history();
    t->set_from(before->state());
    t->set_to(after.state());
    t->set_at_ms(now);
    t->set_why(c.why);
    int excess = after.history_size() - options_.history_limit;
    if (excess > 0) after.mutable_history()->DeleteSubrange(0, excess);
  }
  p.released = ReleasesLane(after) && !ReleasesLane(*before);
  p.rejoined = !ReleasesLane(after) && ReleasesLane(*before);
  // When the record releases its lane, the next command of the entity heads it. Read
  // before anything goes into the batch: a failure leaves the batch as it was.
  if (p.released) {
    EONCE_ASSIGN_OR_RETURN(p.next_due, NextDue(after));
  }

  batch->Put(store_.cf(kRecordsCf), c.command_id, Encode(after));
  AddIndexes(batch, &*before, after);
  if (p.released) batch->Delete(store_.cf(kLanesCf), LaneKey(after));
  if (p.rejoined) batch->Put(store_.cf(kLanesCf), LaneKey(after), c.command_id);
  return p;
}

void OutboxStore::ApplyWritten(const std::string& command_id, const Prepared& p) {
  const OutboxRecord& after = p.after;
  // The memory follows what was written: the record is due at its time if it heads its
  // lane.
  if (auto due = DueAt(after); due.has_value() && IsLaneHead(after)) {
    due_.Set(command_id, *due);
  } else {
    due_.Remove(command_id);
  }
  if (p.next_due.has_value()) due_.Set(p.next_due->first, p.next_due->second);
  if (p.released) lanes_.Remove(LaneOf(after), after.enqueue_seq());
  if (p.rejoined) lanes_.Add(LaneOf(after), after.enqueue_seq(), command_id);
  if (after.state() != p.before_state) {
    counts_[p.before_state]--;
    counts_[after.state()]++;
  }
}

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
    EONCE_ASSIGN_OR_RETURN(auto anchor, Get(after));
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
    EONCE_ASSIGN_OR_RETURN(auto record, Get(it->key().ToString().substr(9)));
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
  for (const char* name : {kRecordsCf, kDueCf, kStatesCf, kLanesCf}) {
    EONCE_RETURN_IF_ERROR(store_.FlushAndCompact(name));
  }
  return absl::OkStatus();
}

}  // namespace eonce
