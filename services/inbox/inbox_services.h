// gRPC adapters that any service using the Inbox registers as they are: the Outcome
// service (QueryOutcome) and the Effects service (the effect ledger), plus the helper
// that turns an Inbox result into a typed unary answer.
#ifndef EONCE_SERVICES_INBOX_INBOX_SERVICES_H_
#define EONCE_SERVICES_INBOX_INBOX_SERVICES_H_

#include "common/grpc_status.h"
#include "eonce/v1/outcome.grpc.pb.h"
#include "common/work_pool.h"
#include "google/protobuf/message.h"
#include "grpcpp/server_context.h"
#include "services/inbox/inbox.h"

namespace eonce {

// The identity the sidecar sent with a call (its request metadata).
CallIdentity IdentityFromMetadata(const grpc::ServerContextBase& context);

class OutcomeServiceImpl : public v1::Outcome::CallbackService {
 public:
  explicit OutcomeServiceImpl(Inbox& inbox) : inbox_(inbox) {}
  grpc::ServerUnaryReactor* QueryOutcome(grpc::CallbackServerContext* context,
                                         const v1::QueryOutcomeRequest* request,
                                         v1::QueryOutcomeResponse* response) override;

 private:
  Inbox& inbox_;
};

class EffectsServiceImpl : public v1::Effects::CallbackService {
 public:
  explicit EffectsServiceImpl(Inbox& inbox) : inbox_(inbox) {}
  grpc::ServerUnaryReactor* ListEffects(grpc::CallbackServerContext* context,
                                        const v1::ListEffectsRequest* request,
                                        v1::ListEffectsResponse* response) override;

 private:
  Inbox& inbox_;
};

// Finishes a typed unary call with the result of a mutation: the stored response bytes
// parsed into `response`, or the business rejection with its error details.
grpc::ServerUnaryReactor* FinishMutation(grpc::CallbackServerContext* context,
                                         const absl::StatusOr<v1::CallResult>& result,
                                         google::protobuf::Message* response);

// The same, on a reactor already taken from the context.
void FinishMutationOn(grpc::ServerUnaryReactor* reactor, grpc::CallbackServerContext* context,
                      const absl::StatusOr<v1::CallResult>& result,
                      google::protobuf::Message* response);

// Runs a mutation on `pool` (inline when null) and finishes the call with its result.
// `before_finish`, if set, sees a successful result first (to add trailers). A full pool
// answers RESOURCE_EXHAUSTED with `eonce-not-applied: true`: nothing was applied.
grpc::ServerUnaryReactor* RunMutation(
    grpc::CallbackServerContext* context, WorkPool* pool,
    std::function<absl::StatusOr<v1::CallResult>()> mutation, google::protobuf::Message* response,
    std::function<void(const v1::CallResult&)> before_finish = nullptr);

}  // namespace eonce

#endif  // EONCE_SERVICES_INBOX_INBOX_SERVICES_H_
