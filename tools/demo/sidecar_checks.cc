#include "tools/demo/sidecar_checks.h"

#include <chrono>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/command/command.h"
#include "common/coord/slots.h"
#include "eonce/v1/sidecar.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "tools/demo/shards.h"

namespace eonce::demo {
namespace {

std::unique_ptr<grpc::ClientContext> Context(int64_t timeout_ms = 5000) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::milliseconds(timeout_ms));
  return context;
}

}  // namespace

SidecarReplays ReplayAtTheSidecar(const Stack& stack,
                                  const std::map<std::string, v1::OutboxRecord>& records,
                                  int limit) {
  SidecarReplays out;
  // Each command goes to the sidecar that owns its slot now (the only one, unsharded).
  std::vector<std::unique_ptr<v1::Sidecar::Stub>> sidecars;
  for (Process* p : stack.LedgerSidecars()) {
    sidecars.push_back(v1::Sidecar::NewStub(
        grpc::CreateChannel(p->address(), grpc::InsecureChannelCredentials())));
  }
  absl::StatusOr<SlotMap> map = stack.etcd != nullptr
                                    ? stack.etcd->store().Read()
                                    : absl::StatusOr<SlotMap>(absl::NotFoundError("unsharded"));
  int replayed_so_far = 0;
  for (const auto& [id, record] : records) {
    if (record.state() != v1::ACKED ||
        record.command().target_method().rfind("/eonce.ledger.v1.Ledger/", 0) != 0 ||
        ++replayed_so_far > limit) {
      continue;
    }
    auto context = Context();
    context->AddMetadata("eonce-tenant", "acme");
    context->AddMetadata("eonce-credential-epoch", absl::StrCat(record.command().credential_epoch()));
    v1::SubmitRequest request;
    *request.mutable_command() = record.command();
    v1::SubmitResponse response;
    ++out.attempts;
    size_t shard = 0;
    if (stack.shards > 1 && map.ok()) {
      const v1::Entity& entity = record.command().entity();
      shard = static_cast<size_t>(ShardOf(*map, "acme", entity.type(), entity.id()));
    }
    if (sidecars[shard]->Submit(context.get(), request, &response).ok() &&
        response.disposition() == v1::REPLAYED &&
        response.result().response() == record.result().response()) {
      ++out.replayed;
    }
  }
  return out;
}

int64_t ParkedOutcomes(const Stack& stack) {
  int64_t parked = 0;
  std::vector<Process*> sidecars = stack.LedgerSidecars();
  sidecars.push_back(stack.case_sidecar.get());
  sidecars.push_back(stack.legacy_sidecar.get());
  for (Process* p : sidecars) {
    auto admin = v1::SidecarAdmin::NewStub(
        grpc::CreateChannel(p->address(), grpc::InsecureChannelCredentials()));
    auto context = Context();
    context->AddMetadata("eonce-tenant", "acme");
    context->AddMetadata(kOperatorHeader, "demo");
    v1::ListParkedRequest request;
    request.set_limit(1000);
    v1::ListParkedResponse response;
    if (admin->ListParked(context.get(), request, &response).ok()) parked += response.records_size();
  }
  return parked;
}

}  // namespace eonce::demo
