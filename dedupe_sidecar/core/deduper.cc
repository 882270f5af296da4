#include "dedupe_sidecar/core/deduper.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/coord/slots.h"
#include "common/base/status.h"
#include "common/command/trace_context.h"
#include "dedupe_sidecar/core/deduper_context.h"

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

}  // namespace eonce
