// How the Deduper words its answers: the response to a finished command, the replay of a
// stored one, the refusals (malformed, turned away by the business) and the audit event
// each decision leaves.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/base/log.h"
#include "common/base/status.h"
#include "common/command/trace_context.h"
#include "dedupe_sidecar/core/deduper.h"
#include "dedupe_sidecar/core/deduper_context.h"

namespace eonce {

void Deduper::Audit(const Context& ctx, const char* decision, const std::string& result,
                    uint64_t token) {
  v1::AuditEvent event;
  event.set_decision(decision);
  event.set_command_id(ctx.command.command_id());
  event.set_idempotency_key(ctx.command.idempotency_key());
  event.set_tenant(ctx.caller.tenant);
  event.set_actor(ctx.actor);
  event.set_workload(ctx.caller.workload);
  event.set_operation(ctx.command.target_method());
  event.set_payload_hash(ctx.command.payload_hash().sha256());
  event.set_fencing_token(token);
  event.set_result(result);
  event.set_trace_id(TraceIdOf(ctx.command.trace()));
  audit_.Append(std::move(event), &ctx.audit_room);
}

void Deduper::KeepTrace(v1::TraceContext* trace) {
  TraceDrops drops = SanitizeTrace(trace);
  if (drops.traceparent) stats_.traceparents_dropped++;
  if (drops.tracestate) stats_.tracestates_dropped++;
}

void Deduper::RefuseInvalid(Context& ctx, absl::Status why) {
  stats_.invalid++;
  // The fields may be anything: the audit keeps them within their limits.
  const CommandLimits& limits = options_.limits;
  v1::Command& c = ctx.command;
  c.mutable_command_id()->resize(std::min(c.command_id().size(), limits.max_command_id_bytes));
  c.mutable_idempotency_key()->resize(std::min(c.idempotency_key().size(), limits.max_key_bytes));
  c.mutable_target_method()->resize(std::min(c.target_method().size(), limits.max_method_bytes));
  c.mutable_payload_hash()->mutable_sha256()->resize(
      std::min<size_t>(c.payload_hash().sha256().size(), 32));
  ctx.actor = EffectiveActor(ctx.caller.workload,
                             c.actor().empty() ? ctx.caller.actor : c.actor())
                  .substr(0, limits.max_actor_bytes);
  std::string reason = ReasonOf(why);
  Audit(ctx, "invalid", reason.empty() ? "INVALID_ARGUMENT" : reason);
  ctx.Answer(std::move(why));
}

v1::SubmitResponse Deduper::Response(const Context& ctx, const Record& record,
                                     v1::Disposition disposition) const {
  v1::SubmitResponse response;
  response.set_disposition(disposition);
  *response.mutable_result() = record.result();
  response.mutable_replay()->set_replayed(disposition == v1::REPLAYED);
  response.mutable_replay()->set_first_seen_ms(record.first_seen_ms());
  response.mutable_replay()->set_attempts(record.attempts());
  v1::Fence* fence = response.mutable_fence();
  fence->set_tenant(ctx.caller.tenant);
  fence->set_credential_epoch(ctx.caller.credential_epoch);
  fence->set_command_id(record.command_id());
  fence->set_entity_revision(record.entity_revision());
  return response;
}

absl::StatusOr<v1::SubmitResponse> Deduper::Replay(const Context& ctx, const Record& record,
                                                   bool revoked) {
  if (record.tombstone()) {
    stats_.expired++;
    Audit(ctx, "expired", "RECORD_EXPIRED", record.fencing_token());
    return Error(absl::StatusCode::kFailedPrecondition, "RECORD_EXPIRED",
                 "the answer to this key is past retention; only its tombstone is left");
  }
  stats_.replayed++;
  // A retry of a command by the actor that sent it is counted (stats, metrics), not
  // logged: duplicates are reads and cost no write. A stored answer handed to anyone else
  // (another actor under the same key, a caller whose credential was revoked) is audited.
  if (record.actor() != ctx.actor || revoked) {
    Audit(ctx, "duplicate_returned", CodeName(record.result().code()), record.fencing_token());
  }
  return Response(ctx, record, v1::REPLAYED);
}

absl::Status Deduper::Refused(const Context& ctx, const v1::CallResult& result) {
  stats_.refused++;
  Audit(ctx, "refused", CodeName(result.code()));
  std::string why = absl::StrCat(CodeName(result.code()),
                                 result.message().empty() ? "" : ": ",
                                 result.message().substr(0, 200));
  if (static_cast<absl::StatusCode>(result.code()) == absl::StatusCode::kUnimplemented) {
    // gRPC answers UNIMPLEMENTED both for a method the service lacks and for request
    // bytes it cannot parse: either way the command itself is wrong.
    return Error(absl::StatusCode::kInvalidArgument, "UPSTREAM_UNIMPLEMENTED",
                 absl::StrCat("target_method / request: the business answered ", why, " for ",
                              ctx.command.target_method().substr(0, 256),
                              " (no such method, or a request it cannot parse); nothing was "
                              "applied and the key is free"));
  }
  return Error(absl::StatusCode::kFailedPrecondition, "UPSTREAM_REFUSED",
               absl::StrCat("the business refused the sidecar's call (", why,
                            "); nothing was applied and the key is free"));
}

}  // namespace eonce
