#include "outbox_agent/core/replayer.h"

#include "absl/strings/str_cat.h"
#include "common/base/log.h"
#include "common/base/status.h"
#include "common/command/trace_context.h"
#include "outbox_agent/core/replayer_attempt.h"

namespace eonce {
namespace {

// Due heads one Pump reads at most, whatever it skips: past it, the next Pump reads again.
constexpr int kMaxDueScan = 4096;
// A head whose route has no known retention yet is looked at again this much later.
constexpr int64_t kRetentionRecheckMs = 1'000;

bool Sendable(const OutboxRecord& record, int64_t now) {
  switch (record.state()) {
    case v1::QUEUED:
    case v1::RETRYABLE_FAILED:
    case v1::UNKNOWN:
      return record.next_attempt_at_ms() <= now;
    case v1::CLAIMED:
    case v1::SENDING:
      return record.claim().expires_at_ms() <= now;  // a dead worker's claim
    default:
      return false;
  }
}

bool SameSession(const Session& a, const Session& b) {
  return a.tenant == b.tenant && a.actor == b.actor && a.epoch == b.epoch;
}

}  // namespace

absl::Status ValidateReplayerOptions(const ReplayerOptions& o) {
  if (o.max_in_flight < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_in_flight: ", o.max_in_flight, " must be at least 1"));
  }
  if (o.max_round < 1 || o.max_round > o.max_in_flight) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_round: ", o.max_round, " must be between 1 and --max_in_flight (",
        o.max_in_flight, "): a round is attempts in flight at once"));
  }
  if (o.submit_timeout_ms <= 0) {
    return absl::InvalidArgumentError("submit_timeout_ms: must be positive");
  }
  int64_t needed = 2 * o.submit_timeout_ms + ReplayerOptions::kClaimSlackMs;
  if (o.claim_ttl_ms < needed) {
    return absl::InvalidArgumentError(absl::StrCat(
        "claim_ttl_ms: ", o.claim_ttl_ms, " does not cover a reconcile and a submit (2 x ",
        "submit_timeout_ms ", o.submit_timeout_ms, ") and ", ReplayerOptions::kClaimSlackMs,
        " ms for queueing and writes; raise --claim_ttl_ms to at least ", needed,
        " or lower --submit_timeout_ms"));
  }
  return absl::OkStatus();
}

Replayer::Replayer(OutboxStore& store, SidecarClient& client, CredentialState& credential,
                   Clock& clock, Random& random, ReplayerOptions options, StateFeed* feed,
                   FaultInjector* faults, std::function<void()> wake)
    : store_(store),
      client_(client),
      credential_(credential),
      clock_(clock),
      random_(random),
      options_(std::move(options)),
      feed_(feed),
      faults_(faults),
      wake_(std::move(wake)),
      backoff_(options_.retry, random_) {}

int Replayer::in_flight() const {
  absl::MutexLock lock(&mu_);
  return in_flight_;
}

bool Replayer::CanStart() const {
  if (!credential_.active()) return false;
  absl::MutexLock lock(&mu_);
  return in_flight_ < options_.max_in_flight;
}

bool Replayer::SendsAtOnce(const v1::Command& command) const {
  return CanStart() && client_.RetentionMs(command.target_method()).has_value();
}

void Replayer::Publish(const OutboxRecord& record) {
  if (feed_ != nullptr) feed_->Announce(record);
}

bool Replayer::RetireIfTooOld(const OutboxRecord& record) {
  int64_t now = clock_.NowMs();
  int64_t age = now - record.created_at_ms();
  const RetryOptions& retry = options_.retry;
  std::optional<int64_t> retention = client_.RetentionMs(record.command().target_method());
  OutboxState final_state = v1::OUTBOX_STATE_UNSPECIFIED;
  std::string why;
  if (retention.has_value() && age > *retention - retry.retention_margin_ms) {
    final_state = v1::EXPIRED;
    why = "older than the sidecar's retention allows; reconcile or decide by hand";
    stats_.expired++;
  } else if (age > retry.max_age_ms) {
    final_state = v1::DEAD_LETTERED;
    why = "MAX_AGE: older than the maximum age";
    stats_.dead_lettered++;
  } else if (static_cast<int>(record.attempt()) >= retry.max_attempts) {
    final_state = v1::DEAD_LETTERED;
    why = "MAX_ATTEMPTS: out of attempts";
    stats_.dead_lettered++;
  } else {
    return false;
  }
  // Synced: the final state is published (DurableBeforeTold, replayer_answers.cc).
  auto moved = store_.Mutate(record.command().command_id(), why,
                             [&](OutboxRecord* r) {
                               if (r->state() != record.state() ||
                                   r->claim().token() != record.claim().token()) {
                                 return absl::AbortedError("changed meanwhile");
                               }
                               r->set_state(final_state);
                               r->clear_claim();
                               return absl::OkStatus();
                             },
                             /*sync=*/true);
  if (moved.ok()) Publish(*moved);
  return true;
}

int Replayer::Pump() {
  if (!credential_.active()) return 0;
  int free_slots;
  {
    absl::MutexLock lock(&mu_);
    free_slots = options_.max_in_flight - in_flight_;
  }
  if (free_slots <= 0) return 0;
  free_slots = std::min(free_slots, std::max(options_.max_round, 1));
  int64_t now = clock_.NowMs();
  // Pick what to send, then claim it all in one write: nothing is sent before its claim
  // is written, and nothing happens between picking and claiming that anyone could act on.
  std::vector<std::shared_ptr<Attempt>> picked;
  std::vector<OutboxStore::Change> claims;
  std::vector<bool> first_sends;  // the claim marks the record ever_sent for the first time
  absl::flat_hash_set<std::string> picked_entities;
  auto consider = [&](const std::string& id) {
    auto found = store_.GetState(id);
    if (!found.ok() || !found->has_value()) return;
    const OutboxRecord& record = **found;
    if (!Sendable(record, now)) return;
    std::string entity = LaneOf(record);
    if (picked_entities.contains(entity)) return;
    {
      absl::MutexLock lock(&mu_);
      if (busy_entities_.contains(entity)) return;
    }
    if (RetireIfTooOld(record)) return;
    // The retention must be known before anything is sent to that sidecar. Until it is, the
    // head steps back in the due queue (in memory), so that however many such heads there
    // are, they cannot fill every scan ahead of the heads of other routes.
    if (!client_.RetentionMs(record.command().target_method()).has_value()) {
      store_.PostponeDue(id, now + kRetentionRecheckMs);
      return;
    }

    auto attempt = std::make_shared<Attempt>();
    attempt->command_id = id;
    attempt->entity = entity;
    attempt->token = random_.Next() | 1;
    attempt->session = credential_.session();
    attempt->claim_expires_ms = now + options_.claim_ttl_ms;
    // A record whose last outcome is unknown is claimed and reconciled before anything is
    // sent. Any other is claimed and marked SENDING in one write: nothing happens between
    // the two that anyone could act on, and a record a lost worker left CLAIMED or
    // SENDING is treated alike (reconciled, as maybe sent).
    attempt->reconcile_first = record.state() == v1::UNKNOWN ||
                               record.state() == v1::CLAIMED || record.state() == v1::SENDING;
    const bool reconcile_first = attempt->reconcile_first;
    claims.push_back(OutboxStore::Change{
        id, reconcile_first ? "claimed" : "claimed and sending",
        [this, reconcile_first, state = record.state(), token = record.claim().token(),
         new_token = attempt->token, expires = attempt->claim_expires_ms](OutboxRecord* r) {
          if (r->state() != state || r->claim().token() != token) {
            return absl::AbortedError("changed meanwhile");
          }
          // Each attempt is a child span of the producer's: kept in the record (and in
          // the claim's transition) before anything is sent under it.
          if (!r->command().trace().traceparent().empty()) {
            r->set_attempt_span_id(NewSpanId(random_));
          }
          r->set_state(reconcile_first ? v1::CLAIMED : v1::SENDING);
          if (!reconcile_first) r->set_ever_sent(true);
          r->mutable_claim()->set_owner(options_.owner);
          r->mutable_claim()->set_token(new_token);
          r->mutable_claim()->set_expires_at_ms(expires);
          r->set_attempt(r->attempt() + 1);
          return absl::OkStatus();
        },
        /*with_payload=*/true});
    first_sends.push_back(!reconcile_first && !record.ever_sent());
    picked.push_back(std::move(attempt));
    picked_entities.insert(std::move(entity));
  };
  // Heads whose route has no known retention yet are skipped and postponed: the read goes
  // on in growing pages until the round is full, the due heads run out or a page of
  // kMaxDueScan was read, and the postponed heads leave the pages that follow, so no number
  // of such heads can starve every other route. The scan is bounded because each head read
  // costs a store lookup on the replay loop.
  // A page starts where the index does, earliest first: ids already read are passed over.
  // The first page is most often the last, so the ids read are kept only from the second.
  absl::flat_hash_set<std::string> read;
  bool first_page = true;
  for (int limit = free_slots * 4;; limit = std::min(limit * 2, kMaxDueScan)) {
    auto due = store_.Due(now, limit);
    if (!due.ok()) {
      LogError("outbox scan failed", {{"error", std::string(due.status().message())}});
      if (picked.empty()) return 0;
      break;
    }
    for (const std::string& id : *due) {
      if (static_cast<int>(picked.size()) >= free_slots) break;
      if (first_page || read.insert(id).second) consider(id);
    }
    if (static_cast<int>(picked.size()) >= free_slots ||
        due->size() < static_cast<size_t>(limit) || limit >= kMaxDueScan) {
      break;
    }
    // Every id of this page was read (the round is not full): pass them over from now on.
    if (first_page) read.insert(due->begin(), due->end());
    first_page = false;
  }
  // Not synced in general: a lost claim only means the record is claimed again. But the
  // claim that first marks a record ever_sent is durable before its command leaves the
  // process: after a power cut that mark is all that says the command may have reached the
  // sidecar (an EXPIRED record never sent is known not to have happened, and releases its
  // lane: AwaitsOperator). One sync covers every claim of the round.
  std::vector<absl::StatusOr<OutboxRecord>> claimed = store_.MutateMany(claims);
  bool marked = false;
  for (size_t i = 0; i < picked.size(); ++i) marked = marked || (first_sends[i] && claimed[i].ok());
  if (marked) {
    if (absl::Status durable = store_.AwaitDurable(); !durable.ok()) {
      // Nothing is sent: the records stay claimed until their claims run out, and are then
      // reconciled as maybe sent (the store's breaker has tripped; the agent is unready).
      LogError("outbox sync failed; nothing sent", {{"error", std::string(durable.message())}});
      return 0;
    }
  }
  // The round's sends go to the client together, after every attempt is counted: a
  // batching client then sends them as full batches (SidecarClient::SubmitMany), not the
  // first alone.
  std::vector<std::shared_ptr<Attempt>> sends;
  int started = 0;
  bool crashed = false;
  for (size_t i = 0; i < picked.size(); ++i) {
    if (!claimed[i].ok()) continue;
    std::shared_ptr<Attempt>& attempt = picked[i];
    attempt->record = *std::move(claimed[i]);
    // What goes to the sidecar: the producer's trace, under this attempt's span.
    if (!attempt->record.attempt_span_id().empty()) {
      *attempt->record.mutable_command()->mutable_trace() =
          ChildTrace(attempt->record.command().trace(), attempt->record.attempt_span_id());
    }
    {
      absl::MutexLock lock(&mu_);
      ++in_flight_;
      busy_entities_.insert(attempt->entity);
    }
    ++started;
    stats_.attempts++;
    Publish(attempt->record);
    if (!HitFault(faults_, FaultPoint::kAfterClaim).ok()) {
      // The worker died holding the claim, which runs out and is taken over. A failed
      // fault point means this process is going down: send nothing more (the records
      // claimed with this one stay claimed until their claims run out, as a crash would
      // leave them).
      Done(attempt);
      crashed = true;
      break;
    }
    if (attempt->reconcile_first) {
      Reconcile(attempt);
    } else if (ReadyToSend(attempt)) {
      sends.push_back(std::move(attempt));
    } else {
      crashed = true;  // as above: the process is going down before this send
      break;
    }
  }
  if (crashed) {
    // The round's sends not yet handed to the client stay unsent and claimed, as a crash
    // leaves them: only their slots are freed, for the simulation's process to go on.
    for (const std::shared_ptr<Attempt>& attempt : sends) Done(attempt);
    return started;
  }
  Dispatch(std::move(sends));
  return started;
}

int64_t Replayer::CallDeadline(const Attempt& attempt) const {
  return std::min(clock_.NowMs() + options_.submit_timeout_ms,
                  attempt.claim_expires_ms - ReplayerOptions::kClaimSlackMs);
}

void Replayer::Send(std::shared_ptr<Attempt> attempt) {
  // Synced when it first marks the record ever_sent (see Pump).
  const bool first_send = !attempt->record.ever_sent();
  auto sending = store_.Mutate(attempt->command_id, "sending",
                               [&](OutboxRecord* r) {
                                 if (r->claim().token() != attempt->token) {
                                   return absl::AbortedError("claim taken over");
                                 }
                                 r->set_state(v1::SENDING);
                                 r->set_ever_sent(true);
                                 return absl::OkStatus();
                               },
                               /*sync=*/first_send);
  if (!sending.ok()) {
    stats_.stale_claims_refused++;
    Done(attempt);
    return;
  }
  Publish(*sending);
  if (ReadyToSend(attempt)) Dispatch({std::move(attempt)});
}

bool Replayer::ReadyToSend(const std::shared_ptr<Attempt>& attempt) {
  if (!HitFault(faults_, FaultPoint::kBeforeNetworkSend).ok()) {
    Done(attempt);
    return false;
  }
  return true;
}

void Replayer::Dispatch(std::vector<std::shared_ptr<Attempt>> attempts) {
  // A round's attempts share the session they were claimed under, unless the credential
  // changed amid the round: each run of one session goes as one SubmitMany.
  std::vector<SidecarClient::SubmitCall> calls;
  calls.reserve(attempts.size());
  for (size_t i = 0; i < attempts.size(); ++i) {
    std::shared_ptr<Attempt> attempt = attempts[i];
    const v1::Command* command = &attempt->record.command();
    const int64_t deadline = CallDeadline(*attempt);
    calls.push_back(SidecarClient::SubmitCall{
        command, deadline, [this, attempt](absl::StatusOr<v1::SubmitResponse> answer) {
          if (!HitFault(faults_, FaultPoint::kAfterNetworkSendBeforeResponse).ok() ||
              !HitFault(faults_, FaultPoint::kAfterResponseBeforeAck).ok()) {
            // The answer is lost: the record stays SENDING until its claim runs out, then
            // reconciles.
            Done(attempt);
            return;
          }
          OnAnswer(attempt, std::move(answer));
        }});
    const Session& session = attempt->session;
    if (i + 1 == attempts.size() || !SameSession(attempts[i + 1]->session, session)) {
      // `attempts` holds every command until SubmitMany returns.
      client_.SubmitMany(session, std::move(calls));
      calls.clear();
    }
  }
}

void Replayer::Done(const std::shared_ptr<Attempt>& attempt, bool wake) {
  {
    absl::MutexLock lock(&mu_);
    --in_flight_;
    busy_entities_.erase(attempt->entity);
  }
  // The slot is free before the wake, which asks CanStart.
  if (wake && wake_) wake_();
}

}  // namespace eonce
