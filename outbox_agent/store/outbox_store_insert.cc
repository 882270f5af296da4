// OutboxStore's insert path: an Enqueue's record checked and placed in its lane under
// the locks, its batch handed to the committer, and the inserts of the same id that came
// meanwhile answered with it once it is durable (or undone in memory if never written).
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/base/status.h"
#include "outbox_agent/store/outbox_layout.h"
#include "outbox_agent/store/outbox_store.h"

namespace eonce {

using outbox_layout::kLanesCf;
using outbox_layout::kRecordsCf;
using outbox_layout::LaneKey;

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

void OutboxStore::InsertWhenDurable(const v1::Command& command, InsertFn done,
                                    bool sends_at_once) {
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
      // The head of its lane, about to be sent: marked as maybe sent now, under the
      // Enqueue's sync, rather than by a claim synced for it alone.
      const bool head = !NextInLane(record).has_value();
      if (head && sends_at_once) record.set_ever_sent(true);
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
      if (head) due_.Set(id, now);
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

}  // namespace eonce
