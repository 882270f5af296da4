#include "tools/explain/grpc_views.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/base/clock.h"
#include "common/command/command.h"
#include "common/rpc/grpc_status.h"
#include "common/base/status.h"
#include "eonce/v1/agent.grpc.pb.h"
#include "eonce/v1/sidecar.grpc.pb.h"

namespace eonce::explain {
namespace {

constexpr int kMaxMessageBytes = 64 << 20;  // a page of effects or records

void Prepare(const Caller& caller, grpc::ClientContext* context) {
  context->set_deadline(WallIn(caller.timeout_ms));
  context->AddMetadata(kTenantHeader, caller.tenant);
  context->AddMetadata(kActorHeader, "explain");
  if (!caller.operator_name.empty()) context->AddMetadata(kOperatorHeader, caller.operator_name);
}

class GrpcAgentView : public AgentView {
 public:
  GrpcAgentView(const std::string& address, const Caller& caller)
      : address_(address),
        caller_(caller),
        stub_(v1::Agent::NewStub(NewChannel(address, caller.tls, kMaxMessageBytes))) {}

  std::string name() const override { return address_; }

  absl::StatusOr<std::optional<v1::OutboxRecord>> Get(const std::string& command_id) override {
    grpc::ClientContext context;
    Prepare(caller_, &context);
    v1::GetRequest request;
    request.set_command_id(command_id);
    v1::OutboxRecord record;
    grpc::Status status = stub_->Get(&context, request, &record);
    if (status.error_code() == grpc::StatusCode::NOT_FOUND) return std::nullopt;
    if (!status.ok()) return FromGrpcStatus(status, &context);
    return record;
  }

  absl::StatusOr<std::optional<v1::OutboxRecord>> FindByKey(const std::string& key) override {
    v1::ListRequest request;
    request.set_limit(1000);
    for (int scanned = 0; scanned < kMaxRecordsScanned;) {
      grpc::ClientContext context;
      Prepare(caller_, &context);
      v1::ListResponse page;
      grpc::Status status = stub_->List(&context, request, &page);
      if (!status.ok()) return FromGrpcStatus(status, &context);
      for (const v1::OutboxRecord& r : page.records()) {
        if (r.command().idempotency_key() == key) return r;
      }
      scanned += page.records_size();
      if (page.next_after_command_id().empty()) return std::nullopt;
      request.set_after_command_id(page.next_after_command_id());
    }
    return Error(absl::StatusCode::kResourceExhausted, "SCAN_LIMIT",
                 absl::StrCat("no key found in the first ", kMaxRecordsScanned,
                              " records; ask by command id"));
  }

 private:
  std::string address_;
  Caller caller_;
  std::unique_ptr<v1::Agent::Stub> stub_;
};

class GrpcShardView : public ShardView {
 public:
  GrpcShardView(const std::string& address, const Caller& caller)
      : address_(address),
        caller_(caller),
        admin_(v1::SidecarAdmin::NewStub(NewChannel(address, caller.tls, kMaxMessageBytes))) {}

  std::string name() const override { return address_; }

  absl::StatusOr<std::vector<v1::AuditEvent>> Audit(const std::string& command_id,
                                                    const std::string& key) override {
    v1::QueryAuditRequest request;
    if (!command_id.empty()) request.set_command_id(command_id);
    else request.set_idempotency_key(key);
    request.set_limit(1000);
    grpc::ClientContext context;
    Prepare(caller_, &context);
    v1::QueryAuditResponse response;
    grpc::Status status = admin_->QueryAudit(&context, request, &response);
    if (!status.ok()) return FromGrpcStatus(status, &context);
    return std::vector<v1::AuditEvent>(response.events().begin(), response.events().end());
  }

  absl::StatusOr<std::vector<v1::ParkedRecord>> Parked() override {
    v1::ListParkedRequest request;
    request.set_limit(1000);
    grpc::ClientContext context;
    Prepare(caller_, &context);
    v1::ListParkedResponse response;
    grpc::Status status = admin_->ListParked(&context, request, &response);
    if (!status.ok()) return FromGrpcStatus(status, &context);
    return std::vector<v1::ParkedRecord>(response.records().begin(), response.records().end());
  }

  absl::StatusOr<std::vector<v1::Effect>> Effects(
      const std::set<std::string>& command_ids) override {
    std::vector<v1::Effect> found;
    v1::ListEffectsRequest request;
    request.set_limit(10'000);
    for (int scanned = 0; scanned < kMaxEffectsScanned;) {
      grpc::ClientContext context;
      Prepare(caller_, &context);
      v1::ListEffectsResponse page;
      grpc::Status status = admin_->ListEffects(&context, request, &page);
      if (!status.ok()) return FromGrpcStatus(status, &context);
      for (const v1::Effect& e : page.effects()) {
        if (command_ids.count(e.command_id()) > 0) found.push_back(e);
      }
      scanned += page.effects_size();
      if (page.effects_size() == 0 || page.last_seq() <= request.after_seq()) return found;
      request.set_after_seq(page.last_seq());
    }
    return Error(absl::StatusCode::kResourceExhausted, "SCAN_LIMIT",
                 absl::StrCat("more than ", kMaxEffectsScanned, " effects; not all were read"));
  }

 private:
  std::string address_;
  Caller caller_;
  std::unique_ptr<v1::SidecarAdmin::Stub> admin_;
};

}  // namespace

std::unique_ptr<AgentView> NewGrpcAgentView(const std::string& address, const Caller& caller) {
  return std::make_unique<GrpcAgentView>(address, caller);
}

std::unique_ptr<ShardView> NewGrpcShardView(const std::string& address, const Caller& caller) {
  return std::make_unique<GrpcShardView>(address, caller);
}

std::vector<std::string> ExpandShards(const std::vector<std::string>& sidecars,
                                      const Caller& caller) {
  std::vector<std::string> out;
  auto add = [&out](const std::string& a) {
    if (std::find(out.begin(), out.end(), a) == out.end()) out.push_back(a);
  };
  for (const std::string& address : sidecars) {
    add(address);
    auto stub = v1::Sidecar::NewStub(NewChannel(address, caller.tls, kMaxMessageBytes));
    grpc::ClientContext context;
    Prepare(caller, &context);
    v1::SlotMap map;
    if (!stub->GetSlotMap(&context, v1::GetSlotMapRequest(), &map).ok()) continue;
    for (const v1::ShardInfo& shard : map.shards()) add(shard.address());
  }
  return out;
}

}  // namespace eonce::explain
