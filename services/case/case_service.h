// The case service's gRPC adapter. Each mutation's answer also carries the case's new
// revision as the `eonce-entity-revision` trailer, which the sidecar puts in the fence.
#ifndef EONCE_SERVICES_CASE_CASE_SERVICE_H_
#define EONCE_SERVICES_CASE_CASE_SERVICE_H_

#include <memory>

#include "eonce/case/v1/case.grpc.pb.h"
#include "services/case/case.h"
#include "services/inbox/inbox_services.h"
#include "services/inbox/service_host.h"

namespace eonce {

class CaseServiceImpl : public case_mgmt::v1::Cases::CallbackService {
 public:
  CaseServiceImpl(std::unique_ptr<CaseCore> core, Inbox& inbox)
      : core_(std::move(core)), inbox_(inbox) {}

  grpc::ServerUnaryReactor* CreateCase(grpc::CallbackServerContext* context,
                                       const case_mgmt::v1::CreateCaseRequest* request,
                                       case_mgmt::v1::Case* response) override;
  grpc::ServerUnaryReactor* Transition(grpc::CallbackServerContext* context,
                                       const case_mgmt::v1::TransitionRequest* request,
                                       case_mgmt::v1::Case* response) override;
  grpc::ServerUnaryReactor* Assign(grpc::CallbackServerContext* context,
                                   const case_mgmt::v1::AssignRequest* request,
                                   case_mgmt::v1::Case* response) override;
  grpc::ServerUnaryReactor* AddNote(grpc::CallbackServerContext* context,
                                    const case_mgmt::v1::AddNoteRequest* request,
                                    case_mgmt::v1::Case* response) override;
  grpc::ServerUnaryReactor* GetCase(grpc::CallbackServerContext* context,
                                    const case_mgmt::v1::GetCaseRequest* request,
                                    case_mgmt::v1::Case* response) override;

  CaseCore& core() { return *core_; }

 private:
  grpc::ServerUnaryReactor* Run(grpc::CallbackServerContext* context, const Mutation& mutation,
                                case_mgmt::v1::Case* response);
  std::unique_ptr<CaseCore> core_;
  Inbox& inbox_;
};

ServiceHost::Setup CaseSetup();

}  // namespace eonce

#endif  // EONCE_SERVICES_CASE_CASE_SERVICE_H_
