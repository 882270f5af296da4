#include "services/case/case_service.h"

#include "absl/strings/str_cat.h"
#include "common/command/command.h"
#include "services/inbox/inbox_services.h"

namespace eonce {

grpc::ServerUnaryReactor* CaseServiceImpl::Run(grpc::CallbackServerContext* context,
                                               const Mutation& mutation,
                                               case_mgmt::v1::Case* response) {
  return RunMutation(context, inbox_, mutation, response,
                     [context](const v1::CallResult& result) {
                       case_mgmt::v1::Case c;
                       if (c.ParseFromString(result.response())) {
                         context->AddTrailingMetadata(kEntityRevisionTrailer,
                                                      absl::StrCat(c.revision()));
                       }
                     });
}

grpc::ServerUnaryReactor* CaseServiceImpl::CreateCase(grpc::CallbackServerContext* context,
                                                      const case_mgmt::v1::CreateCaseRequest* request,
                                                      case_mgmt::v1::Case* response) {
  return Run(
      context, [this, request](const CallIdentity& id) { return core_->CreateCase(id, *request); },
      response);
}

grpc::ServerUnaryReactor* CaseServiceImpl::Transition(grpc::CallbackServerContext* context,
                                                      const case_mgmt::v1::TransitionRequest* request,
                                                      case_mgmt::v1::Case* response) {
  return Run(
      context, [this, request](const CallIdentity& id) { return core_->Transition(id, *request); },
      response);
}

grpc::ServerUnaryReactor* CaseServiceImpl::Assign(grpc::CallbackServerContext* context,
                                                  const case_mgmt::v1::AssignRequest* request,
                                                  case_mgmt::v1::Case* response) {
  return Run(
      context, [this, request](const CallIdentity& id) { return core_->Assign(id, *request); },
      response);
}

grpc::ServerUnaryReactor* CaseServiceImpl::AddNote(grpc::CallbackServerContext* context,
                                                   const case_mgmt::v1::AddNoteRequest* request,
                                                   case_mgmt::v1::Case* response) {
  return Run(
      context, [this, request](const CallIdentity& id) { return core_->AddNote(id, *request); },
      response);
}

grpc::ServerUnaryReactor* CaseServiceImpl::GetCase(grpc::CallbackServerContext* context,
                                                   const case_mgmt::v1::GetCaseRequest* request,
                                                   case_mgmt::v1::Case* response) {
  return FinishUnary(context, core_->GetCase(request->id()), response);
}

ServiceHost::Setup CaseSetup() {
  // No in-process handlers: a case answer carries its entity's revision as a trailer,
  // which a batched forward does not, so every forward is a call of its own.
  return [](RocksStore& store, Inbox& inbox) -> absl::StatusOr<HostedService> {
    return HostedService{
        std::make_shared<CaseServiceImpl>(std::make_unique<CaseCore>(store, inbox), inbox), {}};
  };
}

}  // namespace eonce
