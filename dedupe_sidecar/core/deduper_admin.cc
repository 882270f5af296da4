// The Deduper's lookups, checks, settings and operator calls (Reconcile, ListParked,
// ResolveParked, Info, who owns a key, the tenant and operator checks, option
// validation), apart from the Submit path in deduper.cc.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/base/log.h"
#include "common/coord/slots.h"
#include "common/base/status.h"
#include "dedupe_sidecar/core/deduper.h"
#include "dedupe_sidecar/core/deduper_context.h"

namespace eonce {

absl::Status ValidateDeduperOptions(const DeduperOptions& o) {
  if (o.forward_timeout_ms <= 0) {
    return absl::InvalidArgumentError("forward_timeout_ms: must be positive");
  }
  if (o.outcome_query_timeout_ms <= 0) {
    return absl::InvalidArgumentError("outcome_query_timeout_ms: must be positive");
  }
  int64_t needed = o.outcome_query_timeout_ms + o.forward_timeout_ms + DeduperOptions::kLeaseSlackMs;
  if (o.lease_ms < needed) {
    return absl::InvalidArgumentError(absl::StrCat(
        "lease_ms: ", o.lease_ms, " does not cover a recovery: an outcome query (",
        "outcome_query_timeout_ms ", o.outcome_query_timeout_ms, "), a forward (forward_timeout_ms ",
        o.forward_timeout_ms, ") and ", DeduperOptions::kLeaseSlackMs,
        " ms for queueing and synced writes; raise --lease_ms to at least ", needed,
        " or lower --forward_timeout_ms / --outcome_query_timeout_ms"));
  }
  return absl::OkStatus();
}

// A key belongs to the command that first used it, with that command's payload. Another
// payload or another command id under the key is a terminal conflict, never its answer.
absl::Status Deduper::CheckOwner(const Record& record, const std::string& command_id,
                        const std::string& payload_sha256) {
  if (!payload_sha256.empty() && record.payload_hash() != payload_sha256) {
    return Error(absl::StatusCode::kAlreadyExists, "IDEMPOTENCY_CONFLICT",
                 "this idempotency key was used with a different payload");
  }
  if (!command_id.empty() && !record.command_id().empty() && record.command_id() != command_id) {
    return Error(absl::StatusCode::kAlreadyExists, "KEY_REUSED",
                 "this idempotency key belongs to another command id");
  }
  return absl::OkStatus();
}

absl::Status Deduper::RequireTenant(const Caller& caller) {
  if (!caller.tenant.empty()) return absl::OkStatus();
  return Error(absl::StatusCode::kUnauthenticated, "NO_IDENTITY", "the caller has no tenant");
}

absl::StatusOr<v1::ReconcileResponse> Deduper::Reconcile(const Caller& caller,
                                                         const v1::ReconcileRequest& request) {
  EONCE_RETURN_IF_ERROR(RequireTenant(caller));
  if (shards_ != nullptr && request.has_entity()) {
    EONCE_RETURN_IF_ERROR(shards_->Check(
        SlotOf(caller.tenant, request.entity().type(), request.entity().id())));
  }
  std::string key = request.idempotency_key();
  std::optional<Record> record;
  if (request.lookup_case() == v1::ReconcileRequest::kCommandId) {
    if (request.command_id().empty() ||
        request.command_id().size() > options_.limits.max_command_id_bytes) {
      return Error(absl::StatusCode::kInvalidArgument, "INVALID_FIELD",
                   "command_id: 1..128 bytes");
    }
    // A command in flight to an inbox-keeping business is claimed in memory; its claim
    // leaves only once its record is stored, so looking there first misses nothing.
    std::optional<std::string> found = claims_.KeyOfCommand(caller.tenant, request.command_id());
    if (!found.has_value()) {
      EONCE_ASSIGN_OR_RETURN(found, store_.KeyOfCommand(caller.tenant, request.command_id()));
    }
    key = found.value_or("");
  } else if (key.empty() || key.size() > options_.limits.max_key_bytes) {
    return Error(absl::StatusCode::kInvalidArgument, "INVALID_FIELD",
                 "idempotency_key or command_id: required, within limits");
  }
  if (!key.empty()) {
    record = claims_.Get(ScopedKey(caller.tenant, key));
    if (!record.has_value()) {
      EONCE_ASSIGN_OR_RETURN(record, store_.Get(caller.tenant, key));
    }
  }

  // A lookup hands out what a duplicate Submit of the command would: it is checked as that
  // Submit is, against the policy as it stands now. The command's own actor (the record's)
  // comes first, as in Submit, and the method is the record's; for a key nothing holds,
  // only the caller's credential and whom it acts for. An operator the policy names for
  // the tenant may look up any key, as it may list parked records and read the audit.
  Context ctx;
  ctx.caller = caller;
  *ctx.command.mutable_trace() = caller.trace;  // the asking attempt's, for the audit
  ctx.command.set_command_id(record.has_value() ? record->command_id() : request.command_id());
  ctx.command.set_idempotency_key(key);
  const uint64_t token = record.has_value() ? record->fencing_token() : 0;
  if (record.has_value()) {
    ctx.command.set_target_method(record->operation());
    ctx.command.mutable_payload_hash()->set_sha256(record->payload_hash());
  }
  bool revoked = false;
  if (!caller.operator_name.empty() && policy_.IsOperator(caller.tenant, caller.operator_name)) {
    EONCE_RETURN_IF_ERROR(RefuseRevokedOperator(caller));
    ctx.actor = absl::StrCat("operator:", caller.operator_name);
  } else {
    ctx.actor = record.has_value() ? record->actor()
                                   : EffectiveActor(caller.workload, caller.actor);
    // Under mutual TLS the epoch is the certificate's: a caller cannot choose it.
    const int64_t epoch = caller.certificate_epoch.value_or(caller.credential_epoch);
    PolicyDecision decision =
        record.has_value()
            ? policy_.Check(caller.tenant, caller.workload, ctx.actor, record->operation(), epoch)
            : policy_.CheckActing(caller.tenant, caller.workload, ctx.actor, epoch);
    // As in Submit: a duplicate of a command finished before its credential was revoked
    // may be given its stored answer, where the options say so.
    // Only for the very command that finished (its id and payload, as Submit asks), and
    // only where the act and allow rules would let the lookup through.
    revoked = !decision.allowed && decision.reason == "CREDENTIAL_REVOKED" &&
              options_.replay_after_revocation && record.has_value() && IsFinished(*record) &&
              !request.expect_payload_sha256().empty() &&
              record->payload_hash() == request.expect_payload_sha256() &&
              record->command_id() == request.expect_command_id() &&
              policy_.CheckGrants(caller.tenant, caller.workload, ctx.actor, record->operation())
                  .allowed;
    if (!decision.allowed && !revoked) {
      stats_.denied++;
      Audit(ctx, "unauthorized", decision.reason, token);
      absl::Status refused = Error(absl::StatusCode::kPermissionDenied, decision.reason,
                                   absl::StrCat("not allowed: ", decision.reason));
      refused = WithErrorMetadata(refused, "actor", ctx.actor);
      refused = WithErrorMetadata(refused, "workload", caller.workload);
      return WithErrorMetadata(refused, "credential_epoch", absl::StrCat(epoch));
    }
  }

  v1::ReconcileResponse response;
  response.set_idempotency_key(key);
  if (!record.has_value()) {
    response.set_state(v1::RECORD_NOT_SEEN);
    if (key.empty()) response.set_command_id(request.command_id());
    Audit(ctx, "reconciled", v1::RecordState_Name(response.state()));
    return response;
  }
  if (absl::Status owner =
          CheckOwner(*record, request.expect_command_id(), request.expect_payload_sha256());
      !owner.ok()) {
    stats_.conflicts++;
    Audit(ctx, "conflict", ReasonOf(owner), token);
    return owner;
  }
  response.set_command_id(record->command_id());
  response.set_payload_sha256(record->payload_hash());
  response.mutable_replay()->set_first_seen_ms(record->first_seen_ms());
  response.mutable_replay()->set_attempts(record->attempts());
  switch (record->state()) {
    case Record::STARTED:
      response.set_state(v1::RECORD_PROCESSING);
      break;
    case Record::PARKED:
      response.set_state(v1::RECORD_UNKNOWN_PARKED);
      break;
    case Record::COMMITTED:
    case Record::FAILED:
      if (record->tombstone()) {
        response.set_state(v1::RECORD_EXPIRED);
      } else if (not_durable_.Contains(ScopedKey(caller.tenant, key))) {
        // Written, but its fsync is still to come: a crash could take it back, so it is
        // not handed out yet. A lookup never waits (it runs on a gRPC thread); the agent
        // answers PROCESSING with a Submit, which waits for that fsync as a duplicate
        // does (AfterDurable) and then answers from the outcome.
        response.set_state(v1::RECORD_PROCESSING);
      } else {
        response.set_state(record->state() == Record::COMMITTED ? v1::RECORD_COMMITTED
                                                                : v1::RECORD_FAILED);
        *response.mutable_result() = record->result();
      }
      break;
    default:
      return Error(absl::StatusCode::kDataLoss, "STORE_CORRUPT", "record in no state");
  }
  // Each answer is audited: a lookup comes once per unknown outcome (an agent's restart, a
  // lost answer) or from an operator, so the log stays small and shows who read what.
  Audit(ctx, "reconciled",
        revoked ? absl::StrCat(v1::RecordState_Name(response.state()), " CREDENTIAL_REVOKED")
                : v1::RecordState_Name(response.state()),
        token);
  return response;
}

absl::Status Deduper::RefuseRevokedOperator(const Caller& caller) {
  if (caller.operator_name.empty()) return absl::OkStatus();
  // Under mutual TLS the epoch is the certificate's: a caller cannot choose it.
  const int64_t epoch = caller.certificate_epoch.value_or(caller.credential_epoch);
  PolicyDecision decision =
      policy_.CheckActing(caller.tenant, caller.operator_name, caller.operator_name, epoch);
  if (decision.allowed) return absl::OkStatus();
  stats_.denied++;
  LogWarn("operator call refused", {{"tenant", caller.tenant},
                                    {"operator", caller.operator_name},
                                    {"reason", decision.reason}});
  return WithErrorMetadata(Error(absl::StatusCode::kPermissionDenied, decision.reason,
                                 "the operator's credential is revoked"),
                           "credential_epoch", absl::StrCat(epoch));
}

absl::Status Deduper::RequireOperator(const Caller& caller) {
  EONCE_RETURN_IF_ERROR(RequireTenant(caller));
  if (policy_.IsOperator(caller.tenant, caller.operator_name)) {
    return RefuseRevokedOperator(caller);
  }
  stats_.denied++;
  LogWarn("operator call refused", {{"tenant", caller.tenant},
                                    {"operator", caller.operator_name},
                                    {"actor", caller.actor}});
  return Error(absl::StatusCode::kPermissionDenied, "OPERATOR_REQUIRED",
               caller.operator_name.empty()
                   ? "this call needs an operator identity (a certificate naming "
                     "spiffe://<domain>/tenant/<tenant>/operator/<name>)"
                   : "the policy names no such operator for this tenant");
}

absl::Status Deduper::RequirePlatformOperator(const Caller& caller) {
  EONCE_RETURN_IF_ERROR(RequireTenant(caller));
  if (policy_.IsPlatformOperator(caller.tenant, caller.operator_name)) {
    return RefuseRevokedOperator(caller);
  }
  stats_.denied++;
  LogWarn("platform call refused", {{"tenant", caller.tenant},
                                    {"operator", caller.operator_name}});
  return Error(absl::StatusCode::kPermissionDenied, "PLATFORM_OPERATOR_REQUIRED",
               "this call reaches every tenant (the slot map moves every tenant's commands; "
               "the audit chain holds every tenant's events): it needs an operator the policy "
               "names in a `platform` rule");
}

absl::StatusOr<v1::ListParkedResponse> Deduper::ListParked(const Caller& caller, int limit) {
  EONCE_RETURN_IF_ERROR(RequireOperator(caller));
  EONCE_ASSIGN_OR_RETURN(auto records, store_.ListParked(caller.tenant, limit));
  v1::ListParkedResponse response;
  for (const Record& record : records) {
    v1::ParkedRecord* parked = response.add_records();
    parked->set_idempotency_key(record.idempotency_key());
    parked->set_command_id(record.command_id());
    parked->set_target_method(record.operation());
    parked->set_actor(record.actor());
    parked->set_first_seen_ms(record.first_seen_ms());
    parked->set_fencing_token(record.fencing_token());
  }
  return response;
}

v1::GetInfoResponse Deduper::Info() const {
  v1::GetInfoResponse info;
  internal::RetentionPromise promise = store_.retention_promise();
  info.set_retention_ms(promise.advertised_ms());
  info.set_configured_retention_ms(promise.configured_ms());
  info.set_retention_full_from_ms(promise.full_from_ms());
  // As the retention: what every tombstone already stored keeps, not what is configured.
  info.set_forensic_retention_ms(store_.forensic_promise().advertised_ms());
  info.set_lease_ms(options_.lease_ms);
  info.set_max_key_bytes(static_cast<int64_t>(options_.limits.max_key_bytes));
  info.set_max_request_bytes(static_cast<int64_t>(options_.limits.max_request_bytes));
  info.set_version("eonce-sidecar/0.1.0");
  return info;
}

absl::StatusOr<v1::ResolveParkedResponse> Deduper::ResolveParked(
    const Caller& caller, const v1::ResolveParkedRequest& request) {
  EONCE_RETURN_IF_ERROR(RequireOperator(caller));
  if (request.idempotency_key().empty() ||
      request.idempotency_key().size() > options_.limits.max_key_bytes) {
    return Error(absl::StatusCode::kInvalidArgument, "INVALID_FIELD",
                 "idempotency_key: required, within limits");
  }
  if (request.operator_note().size() > kMaxOperatorNoteBytes) {
    return Error(absl::StatusCode::kInvalidArgument, "INVALID_FIELD",
                 absl::StrCat("operator_note: longer than ", kMaxOperatorNoteBytes, " bytes"));
  }
  Context ctx;
  ctx.caller = caller;
  ctx.actor = absl::StrCat("operator:", caller.operator_name);
  std::string scoped = ScopedKey(caller.tenant, request.idempotency_key());
  StripedLocks::Guard guard = locks_.Lock({scoped});
  EONCE_ASSIGN_OR_RETURN(auto existing, store_.Get(caller.tenant, request.idempotency_key()));
  if (!existing.has_value() || existing->state() != Record::PARKED) {
    return Error(absl::StatusCode::kFailedPrecondition, "NOT_PARKED",
                 "no parked record under this key");
  }
  Record record = std::move(*existing);
  // A resolution writes the record: only where its slot may be written, and counted as
  // the slot's work while it does (a move waits for it).
  if (std::optional<uint32_t> slot = SlotOfRecord(record); shards_ != nullptr && slot) {
    EONCE_ASSIGN_OR_RETURN(ctx.pass, shards_->Enter(*slot));
  }
  ctx.command.set_command_id(record.command_id());
  ctx.command.set_idempotency_key(record.idempotency_key());
  ctx.command.set_target_method(record.operation());
  ctx.command.mutable_payload_hash()->set_sha256(record.payload_hash());
  v1::ResolveParkedResponse response;
  if (request.applied()) {
    record.set_state(request.result().code() == 0 ? Record::COMMITTED : Record::FAILED);
    *record.mutable_result() = request.result();
    record.set_updated_ms(clock_.NowMs());
    EONCE_RETURN_IF_ERROR(store_.Write(record, Record::PARKED, true));
    Audit(ctx, "resolved_applied", request.operator_note(), record.fencing_token());
    response.set_state(request.result().code() == 0 ? v1::RECORD_COMMITTED : v1::RECORD_FAILED);
  } else {
    EONCE_RETURN_IF_ERROR(store_.Delete(record, true));
    Audit(ctx, "resolved_not_applied", request.operator_note(), record.fencing_token());
    response.set_state(v1::RECORD_NOT_SEEN);
  }
  return response;
}

}  // namespace eonce
