// How the Replayer applies what an attempt learned (an answer, or a failure classified by
// retry_policy.h) to its record: each move is queued, and the moves of one batch of
// answers are written together, synced when one of them must be durable before anyone is
// told of it. The claims and sends that lead here are in replayer.cc.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/callback_batch.h"
#include "common/rpc/grpc_status.h"
#include "common/base/log.h"
#include "common/base/status.h"
#include "common/command/trace_context.h"
#include "outbox_agent/core/attempt_log.h"
#include "outbox_agent/core/replayer.h"
#include "outbox_agent/core/replayer_attempt.h"
#include "outbox_agent/store/states.h"

namespace eonce {
namespace {

void SetError(OutboxRecord* record, const absl::Status& status, int64_t now) {
  v1::LastError* error = record->mutable_last_error();
  error->set_code(static_cast<int>(status.code()));
  error->set_reason(ReasonOf(status));
  error->set_message(std::string(status.message()).substr(0, 512));
  error->set_at_ms(now);
}

// Whether a record in `state` must be durable before anyone outside is told of it. A final
// state other than ACKED says the command will not take effect (REJECTED, CONFLICT,
// EXPIRED, DEAD_LETTERED): if a power cut took it back, the record would be SENDING again,
// reconciled and, where the sidecar stored nothing (a refusal of its own: POLICY_DENIED,
// UNKNOWN_METHOD, CREDENTIAL_REVOKED, a key conflict), sent again and maybe applied, after
// the producer was told it would not be. ACKED may go unsynced: the command took effect,
// and a resend after a lost ACKED is answered as a duplicate with the same outcome (the
// restart reconciles first, and the sidecar answers from its record, or forwards and the
// business's inbox answers from its entry), so the producer's answer holds; the next
// synced write of the store (a claim, an Enqueue, the health probe each second) makes it
// durable anyway. Non-final states are taken back harmlessly: a restart reconciles.
bool DurableBeforeTold(OutboxState state) { return IsFinal(state) && state != v1::ACKED; }

std::string RejectionReason(const v1::CallResult& result) {
  std::optional<v1::Rejection> rejection = RejectionOf(result.error_details());
  if (rejection.has_value() && !rejection->reason().empty()) return rejection->reason();
  return "BUSINESS_REJECTION";
}

// How an attempt ended, with the command's trace and the attempt's span. Logged for a
// command whose trace is sampled (its ordinary steps too, common/command/trace_context.h), and for
// any command that ends needing an operator; otherwise the record's history holds it: a
// line per failed attempt would flood the log while a sidecar is down.
bool LogsAttemptEnd(const OutboxRecord& record) {
  switch (record.state()) {
    case v1::CONFLICT:
    case v1::DEAD_LETTERED:
    case v1::EXPIRED:
      return true;
    default:
      return Sampled(record.command().trace());
  }
}

void LogAttemptEnd(const OutboxRecord& record) {
  LogFields fields = {{"command_id", record.command().command_id()},
                      {"key", record.command().idempotency_key()},
                      {"operation", record.command().target_method()},
                      {"state", v1::OutboxState_Name(record.state())},
                      {"attempt", absl::StrCat(record.attempt())},
                      {"reason", record.last_error().reason()}};
  AddTraceField(record.command().trace(), &fields);
  if (!record.attempt_span_id().empty()) fields.emplace_back("span_id", record.attempt_span_id());
  if (record.state() == v1::ACKED) {
    LogInfo("command acked", fields);
  } else if (IsFinal(record.state())) {
    LogWarn("command ended without being applied", fields);
  } else {
    LogInfo("attempt failed; will retry", fields);
  }
}

}  // namespace

void Replayer::OnAnswer(std::shared_ptr<Attempt> attempt,
                        absl::StatusOr<v1::SubmitResponse> answer) {
  if (!answer.ok()) {
    OnFailure(attempt, answer.status());
    return;
  }
  if (!answer->fence().command_id().empty() &&
      answer->fence().command_id() != attempt->command_id) {
    // Answers of a batch are matched to commands by position: one fenced for another
    // command says the matching went wrong, so what happened to this one is unknown.
    OnFailure(attempt, Error(absl::StatusCode::kInternal, "ANSWER_MISMATCH",
                             absl::StrCat("the sidecar's answer is for command ",
                                          answer->fence().command_id().substr(0, 128))));
    return;
  }
  if (!credential_.Fits(attempt->session, answer->fence())) {
    // Receiving an answer does not grant permission to apply it.
    stats_.stale_responses_refused++;
    Transition(attempt, "STALE_RESPONSE: the answer's fence no longer fits the session",
               [this](OutboxRecord* r) {
                 r->set_state(v1::RETRYABLE_FAILED);
                 SetError(r, Error(absl::StatusCode::kAborted, "STALE_RESPONSE",
                                   "answer fenced off by a credential change"),
                          clock_.NowMs());
                 r->set_next_attempt_at_ms(clock_.NowMs() + backoff_.DelayMs(r->attempt()));
                 LogAttempt(r, clock_.NowMs(), static_cast<int>(absl::StatusCode::kAborted),
                            "STALE_RESPONSE");
               });
    return;
  }
  const bool business_rejected = answer->result().code() != 0;
  std::string why = business_rejected ? RejectionReason(answer->result()) : "acked";
  Transition(attempt, std::move(why),
             [this, business_rejected, result = std::move(*answer->mutable_result()),
              replay = std::move(*answer->mutable_replay())](OutboxRecord* r) {
               r->set_state(business_rejected ? v1::REJECTED : v1::ACKED);
               *r->mutable_result() = result;
               *r->mutable_replay() = replay;
               if (business_rejected) {
                 v1::LastError* error = r->mutable_last_error();
                 error->set_code(result.code());
                 error->set_reason(RejectionReason(result));
                 error->set_message(result.message().substr(0, 512));
                 error->set_at_ms(clock_.NowMs());
               }
               LogAttempt(r, clock_.NowMs(), result.code(),
                          business_rejected ? RejectionReason(result)
                          : replay.replayed() ? "REPLAYED"
                                              : "APPLIED");
             });
  (business_rejected ? stats_.rejected : stats_.acked)++;
}

void Replayer::OnFailure(const std::shared_ptr<Attempt>& attempt, const absl::Status& status) {
  AnswerClass answer_class = Classify(status);
  // A failure answered under a credential since replaced says nothing of the current one:
  // no pause, no final state; the record goes again, at once and without spending an
  // attempt, under the current credential. Retryable, unknown and parked outcomes keep
  // their class (backoff; reconciled before anything is resent).
  const bool stale = answer_class != AnswerClass::kRetryable &&
                     answer_class != AnswerClass::kUnknown &&
                     answer_class != AnswerClass::kParked &&
                     !credential_.Current(attempt->session);
  int64_t now = clock_.NowMs();
  int64_t retry_after = RetryAfterOf(status).value_or(0);
  std::string why = absl::StrCat(AnswerClassName(answer_class), ": ",
                                 ReasonOf(status).empty() ? absl::StatusCodeToString(status.code())
                                                          : ReasonOf(status));
  if (stale) {
    why = absl::StrCat("credential since replaced: ", why);
    answer_class = AnswerClass::kUnauthenticated;  // its move, without the pause
  } else if (answer_class == AnswerClass::kUnauthenticated) {
    credential_.PauseUntilRenewed();
  }
  Transition(attempt, std::move(why), [this, status, now, retry_after,
                                       answer_class](OutboxRecord* r) {
    SetError(r, status, now);
    switch (answer_class) {
      case AnswerClass::kRetryable:
        stats_.retries_retryable++;
        r->set_state(v1::RETRYABLE_FAILED);
        r->set_next_attempt_at_ms(now + backoff_.DelayMs(r->attempt(), retry_after));
        break;
      case AnswerClass::kUnknown:
        stats_.retries_unknown++;
        r->set_state(v1::UNKNOWN);
        r->set_next_attempt_at_ms(now + backoff_.DelayMs(r->attempt(), retry_after));
        break;
      case AnswerClass::kParked:
        stats_.parked++;
        r->set_state(v1::UNKNOWN);
        r->set_next_attempt_at_ms(now + options_.retry.parked_recheck_ms);
        break;
      case AnswerClass::kConflict:
        stats_.conflicts++;
        r->set_state(v1::CONFLICT);
        break;
      case AnswerClass::kRejected:
        stats_.rejected++;
        r->set_state(v1::REJECTED);
        break;
      case AnswerClass::kExpired:
        stats_.expired++;
        r->set_state(v1::EXPIRED);
        break;
      case AnswerClass::kUnauthenticated:
        // Not the record's fault: no attempt is spent, and it waits for renewal (or goes
        // at once, when the failure was answered under a credential since replaced).
        r->set_state(v1::RETRYABLE_FAILED);
        r->set_attempt(r->attempt() > 0 ? r->attempt() - 1 : 0);
        r->set_next_attempt_at_ms(now);
        break;
      case AnswerClass::kUnclassified:
        stats_.retries_unclassified++;
        r->set_unclassified_failures(r->unclassified_failures() + 1);
        if (static_cast<int>(r->unclassified_failures()) >= options_.retry.max_unclassified) {
          stats_.dead_lettered++;
          r->set_state(v1::DEAD_LETTERED);
        } else {
          r->set_state(v1::RETRYABLE_FAILED);
          r->set_next_attempt_at_ms(now + backoff_.DelayMs(r->attempt(), retry_after));
        }
        break;
    }
    LogAttempt(r, now, static_cast<int>(status.code()),
               ReasonOf(status).empty() ? absl::StatusCodeToString(status.code())
                                        : ReasonOf(status));
  });
}

void Replayer::Transition(const std::shared_ptr<Attempt>& attempt, std::string why,
                          std::function<void(OutboxRecord*)> change) {
  {
    absl::MutexLock lock(&transitions_mu_);
    transitions_.push_back(Pending{attempt, std::move(why), std::move(change)});
  }
  // The answers of one SubmitBatch call come back to back on one thread: their moves are
  // written together once the last one is in (one write instead of one each).
  if (!CallbackBatch::Defer(this, [this] { WriteTransitions(); })) WriteTransitions();
}

void Replayer::WriteTransitions() {
  std::vector<Pending> pending;
  {
    absl::MutexLock lock(&transitions_mu_);
    pending.swap(transitions_);
  }
  if (pending.empty()) return;  // another thread wrote them
  std::vector<OutboxStore::Change> changes;
  changes.reserve(pending.size());
  for (const Pending& p : pending) {
    changes.push_back(OutboxStore::Change{
        p.attempt->command_id, p.why, [&p](OutboxRecord* r) {
          // A worker whose claim was taken over must not write.
          if (r->claim().token() != p.attempt->token) {
            return absl::AbortedError("claim taken over");
          }
          p.change(r);
          r->clear_claim();
          return absl::OkStatus();
        }});
  }
  // Not synced, unless a move must be durable before it is told (DurableBeforeTold): a
  // lost transition leaves the record SENDING, which a restart reconciles with the
  // sidecar. One sync covers the moves of the batch; it waits on this (an answer's)
  // thread, which only refusals and conflicts make do.
  std::vector<absl::StatusOr<OutboxRecord>> moved = store_.MutateMany(changes);
  bool must_sync = false;
  for (const auto& m : moved) must_sync = must_sync || (m.ok() && DurableBeforeTold(m->state()));
  const absl::Status durable = must_sync ? store_.AwaitDurable() : absl::OkStatus();
  for (size_t i = 0; i < pending.size(); ++i) {
    const std::shared_ptr<Attempt>& attempt = pending[i].attempt;
    if (!moved[i].ok()) {
      if (moved[i].status().code() == absl::StatusCode::kAborted) stats_.stale_claims_refused++;
    } else if (DurableBeforeTold(moved[i]->state()) && !durable.ok()) {
      // Not known to be durable: nobody is told (the store's breaker has tripped; the
      // agent is unready, and a restart reads what survived).
      LogError("outbox sync failed; a final state is not announced",
               WithTrace({{"command_id", attempt->command_id},
                          {"error", std::string(durable.message())}},
                         attempt->record.command().trace()));
    } else {
      // Logged before anyone is told, so that a watcher that saw the state finds the line.
      if (LogsAttemptEnd(*moved[i])) LogAttemptEnd(*moved[i]);
      if (moved[i]->state() == v1::ACKED &&
          !HitFault(faults_, FaultPoint::kAfterAckBeforeProjection).ok()) {
        // acked, but the notice is lost: watchers re-read the store
      } else {
        Publish(*moved[i]);
      }
    }
    Done(attempt, /*wake=*/i + 1 == pending.size());
  }
}

}  // namespace eonce
