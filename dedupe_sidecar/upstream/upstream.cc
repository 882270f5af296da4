#include "dedupe_sidecar/upstream/upstream.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/status.h"

namespace eonce {
namespace {

// The two enums name the same five cases.
v1::ForwardOutcome::Kind KindToProto(ForwardReply::Kind kind) {
  switch (kind) {
    case ForwardReply::Kind::kAnswered:
      return v1::ForwardOutcome::ANSWERED;
    case ForwardReply::Kind::kNotApplied:
      return v1::ForwardOutcome::NOT_APPLIED;
    case ForwardReply::Kind::kRefused:
      return v1::ForwardOutcome::REFUSED;
    case ForwardReply::Kind::kConflict:
      return v1::ForwardOutcome::CONFLICT;
    case ForwardReply::Kind::kUnknown:
      break;
  }
  return v1::ForwardOutcome::UNKNOWN;
}

ForwardReply::Kind KindFromProto(v1::ForwardOutcome::Kind kind) {
  switch (kind) {
    case v1::ForwardOutcome::ANSWERED:
      return ForwardReply::Kind::kAnswered;
    case v1::ForwardOutcome::NOT_APPLIED:
      return ForwardReply::Kind::kNotApplied;
    case v1::ForwardOutcome::REFUSED:
      return ForwardReply::Kind::kRefused;
    case v1::ForwardOutcome::CONFLICT:
      return ForwardReply::Kind::kConflict;
    default:
      // UNKNOWN, or a kind this version does not know: nothing is assumed.
      return ForwardReply::Kind::kUnknown;
  }
}

// How soon a command for a method not yet known may come back: the catalog is read again
// in the background, in a few milliseconds once the business serves.
constexpr int64_t kCatalogRetryMs = 200;

}  // namespace

bool IsReservedMethod(absl::string_view method) {
  return absl::StartsWith(method, "/eonce.v1.") || absl::StartsWith(method, "/eonce.internal.") ||
         absl::StartsWith(method, "/grpc.");
}

absl::Status CommandMethodRefusal(MethodKnown known, const std::string& method) {
  const absl::string_view shown = absl::string_view(method).substr(0, 256);
  if (IsReservedMethod(method)) {
    return Error(absl::StatusCode::kPermissionDenied, "RESERVED_METHOD",
                 absl::StrCat(shown, " is eonce's or gRPC's own call, never a caller's: not "
                                     "forwarded, nothing was written"));
  }
  switch (known) {
    case MethodKnown::kServed:
    case MethodKnown::kCannotTell:
      return absl::OkStatus();
    case MethodKnown::kNotServed:
      return WithErrorMetadata(
          Error(absl::StatusCode::kInvalidArgument, "UNKNOWN_METHOD",
                absl::StrCat("target_method: the business service does not implement ", shown,
                             "; nothing was written")),
          "method", std::string(shown));
    case MethodKnown::kNotYetKnown:
      break;
  }
  return WithRetryAfter(
      Error(absl::StatusCode::kUnavailable, "CATALOG_PENDING",
            absl::StrCat("the business's methods are not known yet (it is not serving, or "
                         "its catalog is being read again), so ",
                         shown, " cannot be checked; nothing was written")),
      kCatalogRetryMs);
}

v1::ForwardedCall ForwardedCallOf(const ForwardCall& call) {
  v1::ForwardedCall out;
  out.set_method(call.method);
  out.set_request(call.request);
  out.set_command_id(call.command_id);
  out.set_idempotency_key(call.idempotency_key);
  out.set_tenant(call.tenant);
  out.set_actor(call.actor);
  out.set_payload_sha256(call.payload_sha256);
  out.set_entity(call.entity);
  out.set_fencing_token(call.fencing_token);
  out.set_slot(call.slot);
  out.set_slot_epoch(call.slot_epoch);
  if (!call.trace.traceparent().empty()) *out.mutable_trace() = call.trace;
  return out;
}

ForwardCall ForwardCallOf(const v1::ForwardedCall& call) {
  ForwardCall out;
  out.method = call.method();
  out.request = call.request();
  out.command_id = call.command_id();
  out.idempotency_key = call.idempotency_key();
  out.tenant = call.tenant();
  out.actor = call.actor();
  out.payload_sha256 = call.payload_sha256();
  out.entity = call.entity();
  out.fencing_token = call.fencing_token();
  out.slot = call.slot();
  out.slot_epoch = call.slot_epoch();
  out.trace = call.trace();
  return out;
}

v1::ForwardOutcome ForwardOutcomeOf(ForwardReply reply) {
  v1::ForwardOutcome out;
  out.set_kind(KindToProto(reply.kind));
  *out.mutable_result() = std::move(reply.result);
  out.set_inbox_kept(reply.inbox_kept);
  out.set_detail(std::move(reply.detail));
  out.set_entity_revision(reply.entity_revision);
  return out;
}

ForwardReply ForwardReplyOf(v1::ForwardOutcome outcome) {
  ForwardReply out;
  out.kind = KindFromProto(outcome.kind());
  out.result = std::move(*outcome.mutable_result());
  out.inbox_kept = out.kind == ForwardReply::Kind::kAnswered && outcome.inbox_kept();
  out.detail = std::move(*outcome.mutable_detail());
  out.entity_revision = outcome.entity_revision();
  return out;
}

}  // namespace eonce
