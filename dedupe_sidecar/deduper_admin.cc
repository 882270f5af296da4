// The Deduper's lookups, checks, settings and operator calls (Reconcile, ListParked,
// ResolveParked, Info, who owns a key, the tenant and operator checks, option
// validation), apart from the Submit path in deduper.cc.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/slots.h"
#include "common/status.h"
#include "dedupe_sidecar/deduper.h"
#include "dedupe_sidecar/deduper_context.h"

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
  v1::ReconcileResponse response;
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
    if (!found.has_value()) {
      response.set_state(v1::RECORD_NOT_SEEN);
      response.set_command_id(request.command_id());
      return response;
    }
    key = *found;
  } else if (key.empty() || key.size() > options_.limits.max_key_bytes) {
    return Error(absl::StatusCode::kInvalidArgument, "INVALID_FIELD",
                 "idempotency_key or command_id: required, within limits");
  }
  std::optional<Record> record = claims_.Get(ScopedKey(caller.tenant, key));
  if (!record.has_value()) {
    EONCE_ASSIGN_OR_RETURN(record, store_.Get(caller.tenant, key));
  }
  response.set_idempotency_key(key);
  if (!record.has_value()) {
    response.set_state(v1::RECORD_NOT_SEEN);
    return response;
  }
  response.set_command_id(record->command_id());
  response.set_payload_sha256(record->payload_hash());
  if (absl::Status owner =
          CheckOwner(*record, request.expect_command_id(), request.expect_payload_sha256());
      !owner.ok()) {
    stats_.conflicts++;
    return owner;
  }
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
      } else {
        response.set_state(record->state() == Record::COMMITTED ? v1::RECORD_COMMITTED : v1::RECORD_FAILED);
        *response.mutable_result() = record->result();
      }
      break;
    default:
      return Error(absl::StatusCode::kDataLoss, "STORE_CORRUPT", "record in no state");
  }
  return response;
}

absl::Status Deduper::RequireOperator(const Caller& caller) {
  EONCE_RETURN_IF_ERROR(RequireTenant(caller));
  if (policy_.IsOperator(caller.tenant, caller.operator_name)) return absl::OkStatus();
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
  if (policy_.IsPlatformOperator(caller.tenant, caller.operator_name)) return absl::OkStatus();
  stats_.denied++;
  LogWarn("platform call refused", {{"tenant", caller.tenant},
                                    {"operator", caller.operator_name}});
  return Error(absl::StatusCode::kPermissionDenied, "PLATFORM_OPERATOR_REQUIRED",
               "changing the slot map moves every tenant's commands: it needs an operator "
               "the policy names in a `platform` rule");
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
