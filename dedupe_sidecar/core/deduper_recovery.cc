// The Deduper's recovery of a command whose outcome is unknown: the lease that lets the
// next attempt take it over, the business's QueryOutcome, and what its answer decides
// (store the outcome, forward again, park for an operator); and the freeing of a key
// whose command was not applied. The Submit path that leads here is in deduper.cc.
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/log.h"
#include "common/base/status.h"
#include "common/command/trace_context.h"
#include "dedupe_sidecar/core/deduper.h"
#include "dedupe_sidecar/core/deduper_context.h"

namespace eonce {

bool Deduper::FreeAttempt(const Context& ctx, uint64_t token) {
  if (claims_.Remove(ctx.scoped_key, token)) return false;
  // Unsynced under the lock; the answer waits for it (AnswerOnceFreed).
  auto record = store_.Get(ctx.caller.tenant, ctx.command.idempotency_key());
  if (!record.ok() || !store_.HeldBy(*record, token)) return false;
  if (!store_.Delete(**record, false).ok()) {
    // The record stays, as if the delete were lost: its lease runs out and recovery asks
    // the business.
    stats_.store_errors++;
    return false;
  }
  return true;
}

void Deduper::AnswerOnceFreed(const std::shared_ptr<Context>& ctx, bool freed,
                              absl::Status answer) {
  if (!freed) {
    ctx->Answer(std::move(answer));
    return;
  }
  // The answer says nothing was applied and the key is free: a power cut after it must
  // not bring the started record back. It would hold the key for a command that was
  // never applied: a retry of it would be recovered, and parked for an operator when the
  // business keeps no outcomes to ask; another command under the key (the producer told
  // it is free) would be refused as KEY_REUSED. So the delete is durable first.
  store_.WhenDurable(Record::STATE_UNSPECIFIED,
                     [this, ctx, answer = std::move(answer)](absl::Status durable) mutable {
                       if (!durable.ok()) {
                         stats_.store_errors++;
                         ctx->Answer(std::move(durable));
                         return;
                       }
                       ctx->Answer(std::move(answer));
                     });
}

void Deduper::EndLease(const Context& ctx, uint64_t token) {
  std::optional<Record> held = claims_.HeldBy(ctx.scoped_key, token);
  const bool claimed = held.has_value();
  if (!claimed) {
    auto record = store_.Get(ctx.caller.tenant, ctx.command.idempotency_key());
    if (!record.ok() || !store_.HeldBy(*record, token)) return;
    held = std::move(**record);
  }
  held->set_lease_expires_ms(clock_.NowMs());
  // A claim lives on as a stored started record; if even that write fails, the claim
  // blocks until its lease ends, as the record would.
  if (store_.Write(*held, claimed ? Record::STATE_UNSPECIFIED : Record::STARTED, false).ok() &&
      claimed) {
    claims_.Remove(ctx.scoped_key, token);
  }
}

void Deduper::Recover(const std::shared_ptr<Context>& ctx, uint64_t token) {
  int64_t deadline = CallDeadline(*ctx, options_.outcome_query_timeout_ms);
  upstream_.QueryOutcome(ctx->caller.tenant, ctx->command.command_id(), deadline,
                         [this, ctx, token](absl::StatusOr<v1::QueryOutcomeResponse> outcome) {
                           OnOutcome(ctx, token, std::move(outcome));
                         });
}

void Deduper::OnOutcome(const std::shared_ptr<Context>& ctx, uint64_t token,
                        absl::StatusOr<v1::QueryOutcomeResponse> outcome) {
  if (outcome.ok() && outcome->applied()) {
    // Answered from the business's inbox, which reports an entry only once it is durable.
    Finish(ctx, token, std::move(*outcome->mutable_result()), 0, "recovered",
           options_.business_commit_point);
    return;
  }
  absl::Status answer;
  bool forward = false;
  {
    StripedLocks::Guard guard = locks_.Lock({ctx->scoped_key});
    auto existing = store_.Get(ctx->caller.tenant, ctx->command.idempotency_key());
    if (!existing.ok()) {
      stats_.store_errors++;
      answer = existing.status();
    } else if (!store_.HeldBy(*existing, token)) {
      stats_.fenced++;
      answer = WithRetryAfter(Error(absl::StatusCode::kUnavailable, "IN_PROGRESS",
                                    "a newer attempt of this command holds it"),
                              kPendingRetryMs);
    } else if (outcome.ok()) {
      forward = true;  // not applied: forward again under this (new) token
    } else if (outcome.status().code() == absl::StatusCode::kUnimplemented) {
      Record record = std::move(**existing);
      record.set_state(Record::PARKED);
      record.set_updated_ms(clock_.NowMs());
      // Synced: a parked record must never be re-forwarded blindly after a crash.
      absl::Status written = store_.Write(record, Record::STARTED, true);
      if (!written.ok()) {
        stats_.store_errors++;
        answer = written;
      } else {
        stats_.parked++;
        Audit(*ctx, "parked_unknown", "OUTCOME_UNKNOWN", token);
        LogWarn("outcome unknown and the business cannot tell; parked",
                WithTrace({{"command_id", record.command_id()},
                           {"key", record.idempotency_key()},
                           {"tenant", record.tenant()},
                           {"operation", record.operation()}},
                          ctx->command.trace()));
        answer = Error(absl::StatusCode::kFailedPrecondition, "OUTCOME_UNKNOWN",
                       "the outcome of this command is unknown and parked for an operator");
      }
    } else {
      // The business could not answer now: let the next attempt try again.
      Record record = std::move(**existing);
      record.set_lease_expires_ms(clock_.NowMs());
      store_.Write(record, Record::STARTED, false).IgnoreError();
      stats_.pending++;
      answer = WithRetryAfter(
          Error(absl::StatusCode::kUnavailable, "OUTCOME_PENDING",
                absl::StrCat("cannot ask the business yet: ", outcome.status().message())),
          kPendingRetryMs);
    }
  }
  if (forward) {
    Forward(ctx, token);
    return;
  }
  ctx->Answer(answer);
}

}  // namespace eonce
