#include "services/inbox/inbox_services.h"

#include "common/grpc_status.h"
#include "common/status.h"

namespace eonce {

grpc::ServerUnaryReactor* OutcomeServiceImpl::QueryOutcome(
    grpc::CallbackServerContext* context, const v1::QueryOutcomeRequest* request,
    v1::QueryOutcomeResponse* response) {
  CallIdentity identity = IdentityFromMetadata(*context);
  return FinishRead(context, inbox_.QueryOutcome(identity.tenant, request->command_id()),
                    response);
}

grpc::ServerUnaryReactor* EffectsServiceImpl::ListEffects(
    grpc::CallbackServerContext* context, const v1::ListEffectsRequest* request,
    v1::ListEffectsResponse* response) {
  return FinishRead(context, inbox_.ListEffects(request->after_seq(), request->limit()),
                    response);
}

grpc::ServerUnaryReactor* FinishMutation(grpc::CallbackServerContext* context,
                                         const absl::StatusOr<v1::CallResult>& result,
                                         google::protobuf::Message* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
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
  return reactor;
}

}  // namespace eonce
