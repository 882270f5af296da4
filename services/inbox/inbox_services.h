// gRPC adapters that any service using the Inbox registers as they are: the Outcome
// service (QueryOutcome) and the Effects service (the effect ledger), plus the helper
// that turns an Inbox result into a typed unary answer.
#ifndef EONCE_SERVICES_INBOX_INBOX_SERVICES_H_
#define EONCE_SERVICES_INBOX_INBOX_SERVICES_H_

#include "common/rpc/grpc_status.h"
#include "eonce/v1/outcome.grpc.pb.h"
#include "google/protobuf/message.h"
#include "grpcpp/server_context.h"
#include "services/inbox/inbox.h"

namespace eonce {

// The identity the sidecar sent with a call (its request metadata); the tenant of an
// operator's certificate over mutual TLS. The port's gate (caller_gate.h) has admitted
// the caller before a handler runs.
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

// The transactional outbox, for the relay in the pod (the tenant is the caller's header).
class FollowUpsServiceImpl : public v1::FollowUps::CallbackService {
 public:
  explicit FollowUpsServiceImpl(Inbox& inbox) : inbox_(inbox) {}
  grpc::ServerUnaryReactor* PullFollowUps(grpc::CallbackServerContext* context,
                                          const v1::PullFollowUpsRequest* request,
                                          v1::PullFollowUpsResponse* response) override;
  grpc::ServerUnaryReactor* AckFollowUps(grpc::CallbackServerContext* context,
                                         const v1::AckFollowUpsRequest* request,
                                         v1::AckFollowUpsResponse* response) override;

 private:
  Inbox& inbox_;
};

// A slot's business data, for the sidecar while it moves slots.
class SlotDataServiceImpl : public v1::SlotData::CallbackService {
 public:
  explicit SlotDataServiceImpl(Inbox& inbox) : inbox_(inbox) {}
  grpc::ServerUnaryReactor* ExportSlotData(grpc::CallbackServerContext* context,
                                           const v1::ExportSlotDataRequest* request,
                                           v1::ExportSlotDataResponse* response) override;
  grpc::ServerUnaryReactor* ImportSlotData(grpc::CallbackServerContext* context,
                                           const v1::ImportSlotDataRequest* request,
                                           v1::ImportSlotDataResponse* response) override;
  grpc::ServerUnaryReactor* DropSlotData(grpc::CallbackServerContext* context,
                                         const v1::DropSlotDataRequest* request,
                                         v1::DropSlotDataResponse* response) override;
  grpc::ServerUnaryReactor* HoldSlotData(grpc::CallbackServerContext* context,
                                         const v1::HoldSlotDataRequest* request,
                                         v1::HoldSlotDataResponse* response) override;

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

// Runs a mutation for the caller the request metadata names, on gRPC's callback thread
// (it holds its locks only while it reads and writes; nothing waits for a disk while it
// holds one), and finishes the call with its result once the write is durable: the
// inbox's group commit, so the calls in flight share their fsyncs. Under load no gRPC
// thread waits for one; a call that finds the store quiet syncs on its own thread and
// finishes at once (RocksStore::WhenDurableLeadingWhenIdle), which spares it two thread
// wake-ups.
// `before_finish`, if set, sees a successful result first (to add trailers).
// `mutation` must apply through `inbox.Run`: the answer tells the sidecar (trailer
// `eonce-inbox: kept`) that the inbox holds its outcome, and the sidecar then skips its
// own fsyncs for the method (docs/design.md).
using Mutation = std::function<absl::StatusOr<v1::CallResult>(const CallIdentity& identity)>;
grpc::ServerUnaryReactor* RunMutation(grpc::CallbackServerContext* context, Inbox& inbox,
                                      const Mutation& mutation,
                                      google::protobuf::Message* response,
                                      std::function<void(const v1::CallResult&)> before_finish =
                                          nullptr);

}  // namespace eonce

#endif  // EONCE_SERVICES_INBOX_INBOX_SERVICES_H_
