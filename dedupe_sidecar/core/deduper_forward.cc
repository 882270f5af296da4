// The Deduper's forward: the command sent to the business under its token, within a
// deadline that ends before the lease does, and the business's reply turned into an
// outcome to store, a freed key (nothing applied) or a lease ended for recovery (outcome
// unknown).
#include <algorithm>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/log.h"
#include "common/base/status.h"
#include "common/command/trace_context.h"
#include "dedupe_sidecar/core/deduper.h"
#include "dedupe_sidecar/core/deduper_context.h"

namespace eonce {

void Deduper::Forward(const std::shared_ptr<Context>& ctx, uint64_t token, bool alone) {
  if (absl::Status fault = HitFault(faults_, FaultPoint::kAfterRecordStartedBeforeForward);
      !fault.ok()) {
    ctx->Answer(fault);
    return;
  }
  ForwardCall call;
  call.method = ctx->command.target_method();
  call.request = ctx->command.request();
  call.command_id = ctx->command.command_id();
  call.idempotency_key = ctx->command.idempotency_key();
  call.tenant = ctx->caller.tenant;
  call.actor = ctx->actor;
  call.payload_sha256 = ctx->command.payload_hash().sha256();
  call.trace = ctx->command.trace();
  // Whenever it is known, sharded or not: the business files the call's inbox entry under
  // the entity's slot, so that an entry written before the deployment was sharded moves
  // with its slot too (a duplicate on the new owner is then recognised).
  if (!ctx->command.entity().type().empty()) {
    call.entity = absl::StrCat(ctx->command.entity().type(), "/", ctx->command.entity().id());
  }
  // Sharded: the slot and the epoch the command was let in by, for the business's fence.
  if (shards_ != nullptr) {
    call.slot = ctx->pass.slot();
    call.slot_epoch = ctx->pass.epoch();
  }
  call.fencing_token = token;
  call.deadline_ms = CallDeadline(*ctx, options_.forward_timeout_ms);
  call.parent = ctx->caller.context;
  call.alone = alone;
  stats_.forwards++;
  int64_t started_ms = clock_.NowMs();
  upstream_.Forward(std::move(call), [this, ctx, token, started_ms](ForwardReply reply) {
    stats_.forward_latency.Observe((clock_.NowMs() - started_ms) / 1000.0);
    OnForwardReply(ctx, token, std::move(reply));
  });
}

void Deduper::OnForwardReply(const std::shared_ptr<Context>& ctx, uint64_t token,
                             ForwardReply reply) {
  if (absl::Status fault = HitFault(faults_, FaultPoint::kAfterForwardBeforeCommit); !fault.ok()) {
    ctx->Answer(fault);
    return;
  }
  switch (reply.kind) {
    case ForwardReply::Kind::kAnswered: {
      const bool kept = reply.inbox_kept && options_.business_commit_point;
      inbox_methods_.Learn(ctx->command.target_method(), kept);
      Finish(ctx, token, std::move(reply.result), reply.entity_revision,
             reply.result.code() == 0 ? "committed" : "rejected", kept);
      return;
    }
    case ForwardReply::Kind::kConflict:
      OnKeyConflict(ctx, token, reply);
      return;
    case ForwardReply::Kind::kNotApplied:
    case ForwardReply::Kind::kRefused:
    case ForwardReply::Kind::kUnknown: {
      bool not_applied = reply.kind != ForwardReply::Kind::kUnknown;
      bool freed = false;
      absl::Status answer;
      {
        StripedLocks::Guard guard = locks_.Lock({ctx->scoped_key});
        if (not_applied) {
          freed = FreeAttempt(*ctx, token);
        } else {
          EndLease(*ctx, token);
        }
      }
      if (reply.kind == ForwardReply::Kind::kRefused) {
        AnswerOnceFreed(ctx, freed, Refused(*ctx, reply.result));
        return;
      }
      if (not_applied) {
        stats_.upstream_unavailable++;
        answer = Error(absl::StatusCode::kUnavailable, "UPSTREAM_UNAVAILABLE",
                       absl::StrCat("the business did not apply the call: ", reply.detail));
      } else {
        stats_.pending++;
        LogWarn("outcome unknown; recovery at the next attempt",
                WithTrace({{"command_id", ctx->command.command_id()},
                           {"key", ctx->command.idempotency_key()},
                           {"tenant", ctx->caller.tenant},
                           {"operation", ctx->command.target_method()},
                           {"detail", reply.detail}},
                          ctx->command.trace()));
        answer = Error(absl::StatusCode::kUnavailable, "OUTCOME_PENDING",
                       absl::StrCat("outcome unknown (", reply.detail,
                                    "); the next attempt recovers it"));
      }
      AnswerOnceFreed(ctx, freed, WithRetryAfter(answer, kPendingRetryMs));
      return;
    }
  }
}

void Deduper::OnKeyConflict(const std::shared_ptr<Context>& ctx, uint64_t token,
                            const ForwardReply& reply) {
  bool freed = false;
  {
    // This attempt's claim or record is on a key that is another command's: it goes. The
    // owner's next retry is answered from the business's inbox.
    StripedLocks::Guard guard = locks_.Lock({ctx->scoped_key});
    freed = FreeAttempt(*ctx, token);
  }
  stats_.conflicts++;
  const std::string reason = reply.detail.empty() ? "KEY_REUSED" : reply.detail;
  Audit(*ctx, "conflict", reason, token);
  AnswerOnceFreed(ctx, freed,
                  Error(absl::StatusCode::kAlreadyExists, reason,
                        reply.result.message().substr(0, 512)));
}

int64_t Deduper::CallDeadline(const Context& ctx, int64_t timeout_ms) {
  int64_t deadline = clock_.NowMs() + timeout_ms;
  if (ctx.caller.deadline_ms > 0) deadline = std::min(deadline, ctx.caller.deadline_ms);
  if (ctx.lease_expires_ms > 0) {
    deadline = std::min(deadline, ctx.lease_expires_ms - DeduperOptions::kLeaseSlackMs);
  }
  return deadline;
}

}  // namespace eonce
