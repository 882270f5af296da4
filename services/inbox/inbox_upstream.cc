#include "services/inbox/inbox_upstream.h"

#include "absl/strings/str_cat.h"
#include "common/base/status.h"

namespace eonce {

CallIdentity InboxUpstream::IdentityOf(const ForwardCall& call) {
  CallIdentity identity;
  identity.command_id = call.command_id;
  identity.tenant = call.tenant;
  identity.actor = call.actor;
  identity.idempotency_key = call.idempotency_key;
  identity.payload_sha256 = call.payload_sha256;
  identity.fencing_token = call.fencing_token;
  identity.slot = call.slot;
  identity.slot_epoch = call.slot_epoch;
  identity.trace = call.trace;  // checked by the sidecar that made the call
  if (size_t slash = call.entity.find('/'); slash != std::string::npos && slash > 0) {
    identity.entity_type = call.entity.substr(0, slash);
    identity.entity_id = call.entity.substr(slash + 1);
  }
  identity.durability_by_caller = true;  // WhenDurable below
  return identity;
}

void InboxUpstream::Forward(ForwardCall call, std::function<void(ForwardReply)> done) {
  ForwardReply reply;
  // A call whose caller has stopped waiting is not started: over gRPC the business never
  // sees a call past its deadline, and nothing of it is applied, which the reply can say
  // for certain here (0: no deadline, as for the items of a ForwardBatch).
  if (call.deadline_ms > 0 && clock_.NowMs() >= call.deadline_ms) {
    reply.kind = ForwardReply::Kind::kNotApplied;
    reply.result.set_code(static_cast<int>(absl::StatusCode::kDeadlineExceeded));
    reply.result.set_message("the call's deadline passed before it started; nothing was applied");
    reply.detail = absl::StrCat("DEADLINE_EXCEEDED: ", reply.result.message());
    done(std::move(reply));
    return;
  }
  auto handler = handlers_.find(call.method);
  if (handler == handlers_.end()) {
    // As gRPC's UNIMPLEMENTED: turned away before anything ran.
    reply.kind = ForwardReply::Kind::kRefused;
    reply.result.set_code(static_cast<int>(absl::StatusCode::kUnimplemented));
    reply.result.set_message(absl::StrCat("the business does not implement ", call.method));
    reply.detail = reply.result.message();
    done(std::move(reply));
    return;
  }
  const CallIdentity identity = IdentityOf(call);
  absl::StatusOr<v1::CallResult> result = handler->second(identity, call.request);
  if (IsKeyConflict(result.status())) {
    reply.kind = ForwardReply::Kind::kConflict;
    reply.detail = ReasonOf(result.status());
    done(std::move(reply));
    return;
  }
  if (IsSlotFenced(result.status())) {
    // The slot has moved on: nothing was applied, and it is no outcome to keep.
    reply.kind = ForwardReply::Kind::kNotApplied;
    reply.detail = absl::StrCat("the business refused the slot's write: ",
                                result.status().message());
    done(std::move(reply));
    return;
  }
  if (!result.ok()) {
    // An operating error (the store): whether anything is in the store is not known here;
    // the sidecar recovers it through QueryOutcome.
    reply.kind = ForwardReply::Kind::kUnknown;
    reply.detail = absl::StrCat("business call ended ", result.status().ToString());
    done(std::move(reply));
    return;
  }
  const bool kept = !inbox_.legacy_mode() && !identity.command_id.empty();
  auto answer = [done = std::move(done), result = *std::move(result),
                 kept](absl::Status durable) mutable {
    ForwardReply reply;
    if (!durable.ok()) {
      reply.kind = ForwardReply::Kind::kUnknown;
      reply.detail = absl::StrCat("the business's write did not reach the disk: ",
                                  durable.ToString());
    } else {
      reply.kind = ForwardReply::Kind::kAnswered;
      reply.result = std::move(result);
      reply.inbox_kept = kept;
    }
    done(std::move(reply));
  };
  // A unary Submit's one forward, as a unary mutation over gRPC (RunMutation): its thread
  // syncs a quiet store itself and answers at once. A batch's items go to the committer.
  if (call.alone) {
    inbox_.WhenDurableLeadingWhenIdle(std::move(answer));
  } else {
    inbox_.WhenDurable(std::move(answer));
  }
}

void InboxUpstream::QueryOutcome(
    const std::string& tenant, const std::string& command_id, int64_t /*deadline_ms*/,
    std::function<void(absl::StatusOr<v1::QueryOutcomeResponse>)> done) {
  // Inbox::QueryOutcome, without blocking the caller's thread on the sync (the sidecar
  // may ask from a durability callback).
  if (inbox_.legacy_mode()) {
    done(absl::UnimplementedError("this service keeps no inbox (legacy mode)"));
    return;
  }
  absl::StatusOr<std::optional<internal::InboxEntry>> stored = inbox_.Lookup(tenant, command_id);
  if (!stored.ok()) {
    done(stored.status());
    return;
  }
  if (!stored->has_value()) {
    done(v1::QueryOutcomeResponse());
    return;
  }
  v1::QueryOutcomeResponse response;
  response.set_applied(true);
  *response.mutable_result() = (*stored)->result();
  response.set_applied_at_ms((*stored)->applied_at_ms());
  // Reported only once it is durable, as over gRPC.
  inbox_.WhenDurable([done = std::move(done), response = std::move(response)](
                         absl::Status durable) mutable {
    if (!durable.ok()) {
      done(durable);
    } else {
      done(std::move(response));
    }
  });
}

absl::StatusOr<v1::ExportSlotDataResponse> InboxUpstream::ExportSlotData(
    const v1::ExportSlotDataRequest& request, int64_t /*deadline_ms*/) {
  return inbox_.ExportSlotData(request);
}

absl::StatusOr<v1::ImportSlotDataResponse> InboxUpstream::ImportSlotData(
    const v1::ImportSlotDataRequest& request, int64_t /*deadline_ms*/) {
  return inbox_.ImportSlotData(request);
}

absl::StatusOr<v1::ListEffectsResponse> InboxUpstream::ListEffects(
    const std::string& tenant, const v1::ListEffectsRequest& request, int64_t /*deadline_ms*/) {
  // As over gRPC: the tenant the sidecar names sees its own effects only.
  return inbox_.ListEffects(request.after_seq(), request.limit(), tenant);
}

absl::StatusOr<v1::HoldSlotDataResponse> InboxUpstream::HoldSlotData(
    const v1::HoldSlotDataRequest& request, int64_t /*deadline_ms*/) {
  return inbox_.HoldSlotData(request);
}

absl::StatusOr<v1::DropSlotDataResponse> InboxUpstream::DropSlotData(
    const v1::DropSlotDataRequest& request, int64_t /*deadline_ms*/) {
  return inbox_.DropSlotData(request);
}

}  // namespace eonce
