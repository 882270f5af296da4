// OutboxStore's moves: Mutate and MutateMany, each change read, made and written under
// its command's and entity's locks, and the memory (due queue, lanes, counts) brought
// along once the write is in.
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/base/status.h"
#include "outbox_agent/store/outbox_layout.h"
#include "outbox_agent/store/outbox_store.h"

namespace eonce {

using outbox_layout::DueAt;
using outbox_layout::kLanesCf;
using outbox_layout::kPayloadsCf;
using outbox_layout::kRecordsCf;
using outbox_layout::LaneKey;

absl::StatusOr<OutboxRecord> OutboxStore::Mutate(const std::string& command_id,
                                                 const std::string& why,
                                                 const ChangeFn& change, bool sync) {
  std::vector<absl::StatusOr<OutboxRecord>> moved =
      MutateMany({{command_id, why, change, /*with_payload=*/true}});
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
  EONCE_ASSIGN_OR_RETURN(auto peek, GetState(command_id));
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
  EONCE_ASSIGN_OR_RETURN(auto before, GetState(c.command_id));
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
  // A new attempt's span is a step of the history even when the state stays (a claim
  // taken over from a lost worker is CLAIMED again): the history names every attempt.
  const bool new_span = after.attempt_span_id() != before->attempt_span_id();
  if (after.state() != before->state() || new_span) {
    v1::Transition* t = after.add_history();
    t->set_from(before->state());
    t->set_to(after.state());
    t->set_at_ms(now);
    t->set_why(c.why);
    if (new_span) t->set_span_id(after.attempt_span_id());
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
  // A long payload stays apart while the record may still be sent, so that this write
  // rewrites only the state; a record that is final and releases its lane carries it
  // again, so that retention drops both together (DropAt).
  const bool carries_payload = DropAt(after) > 0;
  std::optional<std::string> payload;  // read, or moved out of the record
  if (after.command().request().empty() && (carries_payload || c.with_payload)) {
    EONCE_ASSIGN_OR_RETURN(payload, ReadPayload(c.command_id));
  }

  if (carries_payload) {
    if (payload.has_value()) {
      after.mutable_command()->set_request(*std::move(payload));
      batch->Delete(store_.cf(kPayloadsCf), c.command_id);
    }
  } else if (auto moved = MovePayloadOut(c.command_id, &after, batch); moved.has_value()) {
    payload = std::move(moved);  // carried until now: requeued, or of an earlier version
  }
  batch->Put(store_.cf(kRecordsCf), c.command_id, Encode(after));
  if (c.with_payload && payload.has_value() && after.command().request().empty()) {
    after.mutable_command()->set_request(*std::move(payload));
  }
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

}  // namespace eonce
