#include "services/inbox/inbox_services.h"

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "common/command/command.h"
#include "common/rpc/grpc_status.h"
#include "common/rpc/metadata.h"
#include "common/base/status.h"
#include "common/command/trace_context.h"
#include "services/inbox/caller_gate.h"

namespace eonce {

CallIdentity IdentityFromMetadata(const grpc::ServerContextBase& context) {
  CallIdentity identity;
  identity.command_id = RequestMetadata(context, kCommandIdHeader);
  identity.tenant = RequestMetadata(context, kTenantHeader);
  // Over mutual TLS an operator acts for its certificate's tenant, stated or not (the
  // gate refused any other); a component's and a plaintext caller's is the header's.
  if (auto auth = context.auth_context(); auth != nullptr && auth->IsPeerAuthenticated()) {
    if (absl::StatusOr<BusinessCaller> caller = BusinessCallerOf(context); caller.ok()) {
      identity.tenant = caller->tenant;
    }
  }
  identity.actor = RequestMetadata(context, kActorHeader);
  identity.idempotency_key = RequestMetadata(context, kIdempotencyKeyHeader);
  // Hex from the sidecar; anything else is not compared.
  std::string hash = RequestMetadata(context, kPayloadHashHeader);
  if (hash.size() == 64) {
    identity.payload_sha256 = absl::HexStringToBytes(hash);
    if (absl::BytesToHexString(identity.payload_sha256) != absl::AsciiStrToLower(hash)) {
      identity.payload_sha256.clear();
    }
  }
  std::string entity = RequestMetadata(context, kEntityHeader);
  if (size_t slash = entity.find('/'); slash != std::string::npos && slash > 0) {
    identity.entity_type = entity.substr(0, slash);
    identity.entity_id = entity.substr(slash + 1);
  }
  // A slot epoch that does not parse counts as none: a slot with a fence refuses the write.
  uint64_t slot_epoch = 0;
  uint32_t slot = 0;
  if (absl::SimpleAtoi(RequestMetadata(context, kSlotEpochHeader), &slot_epoch) &&
      absl::SimpleAtoi(RequestMetadata(context, kSlotHeader), &slot)) {
    identity.slot = slot;
    identity.slot_epoch = slot_epoch;
  }
  // A malformed one is dropped (the sidecar counts those it was sent).
  identity.trace.set_traceparent(RequestMetadata(context, kTraceparentHeader));
  if (!identity.trace.traceparent().empty()) {
    identity.trace.set_tracestate(RequestMetadata(context, kTracestateHeader));
    SanitizeTrace(&identity.trace);
  }
  uint64_t token = 0;
  if (absl::SimpleAtoi(RequestMetadata(context, kFencingTokenHeader), &token)) {
    identity.fencing_token = token;
  }
  return identity;
}

grpc::ServerUnaryReactor* OutcomeServiceImpl::QueryOutcome(
    grpc::CallbackServerContext* context, const v1::QueryOutcomeRequest* request,
    v1::QueryOutcomeResponse* response) {
  CallIdentity identity = IdentityFromMetadata(*context);
  return FinishUnary(context, inbox_.QueryOutcome(identity.tenant, request->command_id()),
                    response);
}

grpc::ServerUnaryReactor* EffectsServiceImpl::ListEffects(
    grpc::CallbackServerContext* context, const v1::ListEffectsRequest* request,
    v1::ListEffectsResponse* response) {
  // Through the sidecar the caller's tenant is always named: only its effects are shown.
  CallIdentity identity = IdentityFromMetadata(*context);
  return FinishUnary(context,
                     inbox_.ListEffects(request->after_seq(), request->limit(), identity.tenant),
                     response);
}

grpc::ServerUnaryReactor* FollowUpsServiceImpl::PullFollowUps(
    grpc::CallbackServerContext* context, const v1::PullFollowUpsRequest* request,
    v1::PullFollowUpsResponse* response) {
  CallIdentity identity = IdentityFromMetadata(*context);
  return FinishUnary(context, inbox_.PullFollowUps(identity.tenant, request->limit()), response);
}

grpc::ServerUnaryReactor* FollowUpsServiceImpl::AckFollowUps(
    grpc::CallbackServerContext* context, const v1::AckFollowUpsRequest* request,
    v1::AckFollowUpsResponse* response) {
  CallIdentity identity = IdentityFromMetadata(*context);
  return FinishUnary(context, inbox_.AckFollowUps(identity.tenant, *request), response);
}

grpc::ServerUnaryReactor* SlotDataServiceImpl::ExportSlotData(
    grpc::CallbackServerContext* context, const v1::ExportSlotDataRequest* request,
    v1::ExportSlotDataResponse* response) {
  return FinishUnary(context, inbox_.ExportSlotData(*request), response);
}

grpc::ServerUnaryReactor* SlotDataServiceImpl::ImportSlotData(
    grpc::CallbackServerContext* context, const v1::ImportSlotDataRequest* request,
    v1::ImportSlotDataResponse* response) {
  return FinishUnary(context, inbox_.ImportSlotData(*request), response);
}

grpc::ServerUnaryReactor* SlotDataServiceImpl::DropSlotData(
    grpc::CallbackServerContext* context, const v1::DropSlotDataRequest* request,
    v1::DropSlotDataResponse* response) {
  return FinishUnary(context, inbox_.DropSlotData(*request), response);
}

grpc::ServerUnaryReactor* SlotDataServiceImpl::HoldSlotData(
    grpc::CallbackServerContext* context, const v1::HoldSlotDataRequest* request,
    v1::HoldSlotDataResponse* response) {
  return FinishUnary(context, inbox_.HoldSlotData(*request), response);
}

grpc::ServerUnaryReactor* RunMutation(grpc::CallbackServerContext* context, Inbox& inbox,
                                      const Mutation& mutation,
                                      google::protobuf::Message* response,
                                      std::function<void(const v1::CallResult&)> before_finish) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  CallIdentity identity = IdentityFromMetadata(*context);
  identity.durability_by_caller = true;  // awaited below, in a group commit
  absl::StatusOr<v1::CallResult> result = mutation(identity);
  // The sidecar learns from this trailer that the outcome is held here (it may then
  // forward and answer without syncing its own records), or that the key was refused.
  const char* inbox_says = nullptr;
  if (result.ok() && !inbox.legacy_mode() && !identity.command_id.empty()) {
    inbox_says = kInboxKept;
  } else if (IsKeyConflict(result.status())) {
    inbox_says = kInboxConflict;
  }
  // A quiet store syncs on this thread and the call finishes before the handler returns;
  // a busy one leaves the sync to its committer, and this thread goes back to gRPC.
  auto finish = [context, reactor, response, result = std::move(result), inbox_says,
                 before_finish = std::move(before_finish)](absl::Status durable) {
    if (!durable.ok()) {
      FinishMutationOn(reactor, context, durable, response);
      return;
    }
    if (inbox_says != nullptr) context->AddTrailingMetadata(kInboxTrailer, inbox_says);
    if (result.ok() && result->code() == 0 && before_finish) before_finish(*result);
    FinishMutationOn(reactor, context, result, response);
  };
  inbox.WhenDurableLeadingWhenIdle(std::move(finish));
  return reactor;
}

grpc::ServerUnaryReactor* FinishMutation(grpc::CallbackServerContext* context,
                                         const absl::StatusOr<v1::CallResult>& result,
                                         google::protobuf::Message* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  FinishMutationOn(reactor, context, result, response);
  return reactor;
}

void FinishMutationOn(grpc::ServerUnaryReactor* reactor, grpc::CallbackServerContext* context,
                      const absl::StatusOr<v1::CallResult>& result,
                      google::protobuf::Message* response) {
  if (!result.ok()) {
    reactor->Finish(ToGrpcStatus(result.status(), context));
  } else if (result->code() != 0) {
    reactor->Finish(StatusOfResult(*result));
  } else if (!response->ParseFromString(result->response())) {
    reactor->Finish(ToGrpcStatus(
        Error(absl::StatusCode::kDataLoss, "STORE_CORRUPT", "stored response undecodable"),
        context));
  } else {
    reactor->Finish(grpc::Status::OK);
  }
}

}  // namespace eonce
