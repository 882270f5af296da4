#include "dedupe_sidecar/deduper.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/slots.h"
#include "common/status.h"
#include "common/trace_context.h"
#include "dedupe_sidecar/deduper_context.h"

namespace eonce {
namespace {

// The hint given with IN_PROGRESS: a forward usually ends within milliseconds, so the
// duplicate comes back soon rather than after the whole lease; the caller's backoff
// stretches it if the original is slow.
constexpr int64_t kInProgressRetryMs = 100;

// The most audit events one Submit appends: every path ends in at most one decision that
// is audited (a refusal, a conflict, a replay handed to someone else, an outcome, a park).
constexpr size_t kAuditEventsPerSubmit = 1;

}  // namespace

Deduper::Deduper(RecordStore& store, AuditLog& audit, Upstream& upstream, PolicyStore& policy,
                 Clock& clock, DeduperOptions options, FaultInjector* faults,
                 ShardGate* shards, InFlightClaims* claims)
    : store_(store),
      audit_(audit),
      upstream_(upstream),
      policy_(policy),
      clock_(clock),
      options_(std::move(options)),
      faults_(faults),
      shards_(shards),
      own_claims_(claims == nullptr ? std::make_unique<InFlightClaims>() : nullptr),
      claims_(claims != nullptr ? *claims : *own_claims_) {}

void Deduper::Submit(Caller caller_in, v1::Command command_in, SubmitDone done) {
  auto ctx = std::make_shared<Context>();
  ctx->caller = std::move(caller_in);
  ctx->command = std::move(command_in);
  ctx->done = std::move(done);
  const Caller& caller = ctx->caller;
  const v1::Command& command = ctx->command;
  // The command's own trace (the agent's attempt span); else the call's metadata (checked
  // in CallerOf). Never part of the key, the hash or any decision below.
  if (ctx->command.trace().traceparent().empty()) {
    *ctx->command.mutable_trace() = caller.trace;
  } else {
    KeepTrace(ctx->command.mutable_trace());
  }

  if (caller.tenant.empty()) {
    stats_.denied++;
    ctx->Answer(Error(absl::StatusCode::kUnauthenticated, "NO_IDENTITY",
                      "the caller has no tenant (client certificate or eonce-tenant)"));
    return;
  }
  // Room in the audit queue for the one event any path of a Submit appends, taken before
  // anything is decided: the append then never waits, under a key's lock or on the
  // store's committer thread (audit_log.h). A writer that is behind turns commands away
  // here instead.
  if (absl::StatusOr<AuditLog::Reservation> room = audit_.Reserve(kAuditEventsPerSubmit);
      room.ok()) {
    ctx->audit_room = *std::move(room);
  } else {
    stats_.audit_backlog++;
    ctx->Answer(room.status());
    return;
  }
  if (absl::Status valid = ValidateName(caller.tenant, options_.limits.max_tenant_bytes,
                                        "tenant");
      !valid.ok()) {
    stats_.invalid++;
    ctx->Answer(valid);
    return;
  }
  if (absl::Status valid = ValidateCommand(command, options_.limits); !valid.ok()) {
    RefuseInvalid(*ctx, std::move(valid));
    return;
  }
  // Before anything is written: a method the business does not have (server reflection),
  // one not known yet (retryable), or one of eonce's own services.
  if (absl::Status method = CommandMethodRefusal(upstream_.Knows(command.target_method()),
                                                 command.target_method());
      !method.ok()) {
    if (method.code() == absl::StatusCode::kUnavailable) {
      stats_.upstream_unavailable++;
      ctx->Answer(std::move(method));
    } else {
      RefuseInvalid(*ctx, std::move(method));
    }
    return;
  }
  ctx->actor = EffectiveActor(caller.workload,
                              command.actor().empty() ? caller.actor : command.actor());
  ctx->scoped_key = ScopedKey(caller.tenant, command.idempotency_key());
  if (!command.tenant().empty() && command.tenant() != caller.tenant) {
    stats_.denied++;
    Audit(*ctx, "unauthorized", "TENANT_MISMATCH");
    ctx->Answer(Error(absl::StatusCode::kPermissionDenied, "TENANT_MISMATCH",
                      "the command names a tenant other than the caller's"));
    return;
  }
  // Before anything is read or written: a slot this shard does not own, or one that is
  // moving, is refused. The pass keeps the slot's work counted until it is over.
  if (shards_ != nullptr) {
    absl::StatusOr<ShardGate::Pass> pass = shards_->Enter(
        SlotOf(caller.tenant, command.entity().type(), command.entity().id()));
    if (!pass.ok()) {
      (ReasonOf(pass.status()) == "SLOT_MOVED" ? stats_.slot_moved : stats_.slot_migrating)++;
      ctx->Answer(pass.status());
      return;
    }
    ctx->pass = std::move(*pass);
  }

  // Under mutual TLS the epoch is the certificate's: a caller cannot choose it.
  PolicyDecision decision =
      policy_.Check(caller.tenant, caller.workload, ctx->actor, command.target_method(),
                    caller.certificate_epoch.value_or(command.credential_epoch()));
  if (!decision.allowed) {
    if (decision.reason == "CREDENTIAL_REVOKED" && options_.replay_after_revocation) {
      // Only a duplicate of the very command that finished: the same command id and
      // payload as the key's record. A new command that reuses the key and the payload
      // is a command the revoked credential may not send, not a duplicate.
      // And only where the policy would let the call through were it not for the
      // revocation: a credential never allowed the actor or the method hears nothing.
      auto record = store_.Get(caller.tenant, command.idempotency_key());
      if (record.ok() && record->has_value() && IsFinished(**record) &&
          (*record)->command_id() == command.command_id() &&
          (*record)->payload_hash() == command.payload_hash().sha256() &&
          policy_.CheckGrants(caller.tenant, caller.workload, ctx->actor,
                              command.target_method())
              .allowed) {
        Record found = std::move(**record);
        auto replay = [this, ctx, found](absl::Status durable) {
          ctx->Answer(durable.ok() ? Replay(*ctx, found, /*revoked=*/true) : durable);
        };
        AfterDurable(ctx->scoped_key, found.state(), /*wrote=*/false, std::move(replay));
        return;
      }
    }
    stats_.denied++;
    Audit(*ctx, "unauthorized", decision.reason);
    absl::Status refused = Error(absl::StatusCode::kPermissionDenied, decision.reason,
                                 absl::StrCat("not allowed: ", decision.reason));
    refused = WithErrorMetadata(refused, "actor", ctx->actor);
    refused = WithErrorMetadata(refused, "workload", caller.workload);
    refused = WithErrorMetadata(refused, "credential_epoch",
                                absl::StrCat(caller.certificate_epoch.value_or(
                                    command.credential_epoch())));
    ctx->Answer(std::move(refused));
    return;
  }

  Begun begun = Begin(ctx);
  if (!begun.await.has_value()) {
    Proceed(ctx, std::move(begun), /*alone=*/caller.one_command);
    return;
  }
  // Outside the key's lock: what Begin wrote (or read) is durable before the forward or
  // the answer, and no thread waits for the fsync meanwhile.
  const Record::State state = *begun.await;
  const bool wrote = begun.wrote;
  AfterDurable(
      ctx->scoped_key, state, wrote,
      [this, ctx, begun = std::make_shared<Begun>(std::move(begun))](absl::Status durable) {
        if (!durable.ok()) {
          stats_.store_errors++;
          ctx->Answer(durable);
          return;
        }
        Proceed(ctx, std::move(*begun));
      });
}

void Deduper::Proceed(const std::shared_ptr<Context>& ctx, Begun begun, bool alone) {
  switch (begun.kind) {
    case Begun::Kind::kAnswer:
      ctx->Answer(std::move(begun.answer));
      return;
    case Begun::Kind::kForward:
      Forward(ctx, begun.token, alone);
      return;
    case Begun::Kind::kRecover:
      Recover(ctx, begun.token);
      return;
  }
}

Deduper::Begun Deduper::Begin(const std::shared_ptr<Context>& ctx) {
  Begun begun;
  const v1::Command& command = ctx->command;
  const std::string& tenant = ctx->caller.tenant;
  StripedLocks::Guard guard = locks_.Lock({ctx->scoped_key});
  auto existing = store_.Get(tenant, command.idempotency_key());
  if (!existing.ok()) {
    stats_.store_errors++;
    begun.answer = existing.status();
    return begun;
  }
  int64_t now = clock_.NowMs();
  // Not in the store: a first attempt in flight to an inbox-keeping business holds it
  // in memory (InFlightClaims), or nothing does.
  bool claimed = false;
  if (!existing->has_value()) {
    *existing = claims_.Get(ctx->scoped_key);
    claimed = existing->has_value();
  }

  if (!existing->has_value()) {
    if (!upstream_.Reachable()) {
      stats_.upstream_unavailable++;
      begun.answer = WithRetryAfter(Error(absl::StatusCode::kUnavailable, "UPSTREAM_UNAVAILABLE",
                                          "the business service is unreachable; nothing was sent"),
                                    kPendingRetryMs);
      return begun;
    }
    Record record;
    record.set_state(Record::STARTED);
    record.set_tenant(tenant);
    record.set_idempotency_key(command.idempotency_key());
    record.set_command_id(command.command_id());
    record.set_actor(ctx->actor);
    record.set_operation(command.target_method());
    *record.mutable_entity() = command.entity();  // its slot, for a move (sharding)
    record.set_payload_hash(command.payload_hash().sha256());
    record.set_lease_owner(options_.instance_id);
    record.set_fencing_token(1);
    record.set_lease_expires_ms(now + options_.lease_ms);
    record.set_first_seen_ms(now);
    record.set_updated_ms(now);
    record.set_attempts(1);
    record.set_credential_epoch(command.credential_epoch());
    // Before the business can see the call, the record must survive a crash, or the
    // sidecar could forget a forward that happened. Where the business keeps an inbox,
    // the inbox is what survives (it refuses a second apply and a reused key), so the
    // record is only claimed in memory, to turn concurrent duplicates away (a full table
    // of claims: written, not synced); otherwise it is written, and Submit waits for it
    // once the lock is released (begun.await).
    const bool kept = inbox_methods_.Kept(command.target_method());
    bool claimed_now = false;
    if (kept) {
      // A claim writes nothing, but the outcome will: a store that refuses writes (a full
      // disk, a failed store) refuses the command before the business sees it, as the
      // record's write did.
      if (absl::Status writable = store_.rocks().CheckWritable(); !writable.ok()) {
        stats_.store_errors++;
        begun.answer = writable;
        return begun;
      }
      claimed_now = claims_.Add(ctx->scoped_key, record);
    }
    if (claimed_now) {
      stats_.claimed_in_memory++;
    } else {
      if (absl::Status written = store_.Write(record, Record::STATE_UNSPECIFIED, false);
          !written.ok()) {
        stats_.store_errors++;
        begun.answer = written;
        return begun;
      }
      begun.wrote = true;
    }
    begun.kind = Begun::Kind::kForward;
    if (kept) {
      stats_.forwards_before_sync++;
    } else {
      begun.await = Record::STARTED;
    }
    begun.token = record.fencing_token();
    ctx->lease_expires_ms = record.lease_expires_ms();
    return begun;
  }

  Record record = std::move(**existing);
  if (absl::Status owner =
          CheckOwner(record, command.command_id(), command.payload_hash().sha256());
      !owner.ok()) {
    stats_.conflicts++;
    Audit(*ctx, "conflict", ReasonOf(owner), record.fencing_token());
    begun.answer = owner;
    return begun;
  }
  Record::State previous = record.state();
  record.set_attempts(record.attempts() + 1);  // in the answer; stored only by a takeover
  switch (record.state()) {
    case Record::COMMITTED:
    case Record::FAILED:
      // A duplicate is a read: nothing is written for it. The outcome it is answered with
      // may still be on its way to the disk: then it waits for the same fsync as its Finish.
      begun.answer = Replay(*ctx, record);
      if (begun.answer.ok()) begun.await = record.state();
      return begun;
    case Record::PARKED:
      Audit(*ctx, "parked_unknown", "duplicate", record.fencing_token());
      begun.answer = Error(absl::StatusCode::kFailedPrecondition, "OUTCOME_UNKNOWN",
                           "the outcome of this command is unknown and parked for an operator");
      return begun;
    case Record::STARTED:
      if (record.lease_expires_ms() > now) {
        stats_.in_progress++;
        Audit(*ctx, "in_progress", "IN_PROGRESS", record.fencing_token());
        begun.answer = WithRetryAfter(
            Error(absl::StatusCode::kUnavailable, "IN_PROGRESS",
                  "the original attempt of this command is still in flight"),
            std::clamp<int64_t>(record.lease_expires_ms() - now, 1, kInProgressRetryMs));
        return begun;
      }
      // The lease ran out: take the record over under a new token, then recover. A claim
      // taken over lives on as a stored record, which recovery works on.
      record.set_fencing_token(record.fencing_token() + 1);
      record.set_lease_owner(options_.instance_id);
      record.set_lease_expires_ms(now + options_.lease_ms);
      record.set_updated_ms(now);
      if (absl::Status written =
              store_.Write(record, claimed ? Record::STATE_UNSPECIFIED : previous, false);
          !written.ok()) {
        stats_.store_errors++;
        begun.answer = written;
        return begun;
      }
      if (claimed) claims_.Remove(ctx->scoped_key, record.fencing_token() - 1);
      begun.kind = Begun::Kind::kRecover;
      if (!inbox_methods_.Kept(command.target_method())) begun.await = Record::STARTED;
      begun.wrote = true;
      begun.token = record.fencing_token();
      ctx->lease_expires_ms = record.lease_expires_ms();
      return begun;
    default:
      begun.answer = Error(absl::StatusCode::kDataLoss, "STORE_CORRUPT", "record in no state");
      return begun;
  }
}

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
