#include "tools/reshard/grpc_shard_admin.h"

#include "common/base/clock.h"
#include "common/command/command.h"
#include "common/rpc/grpc_status.h"
#include "common/base/status.h"
#include "eonce/v1/sidecar.grpc.pb.h"

namespace eonce {
namespace {

constexpr int kMaxMessageBytes = 16 << 20;

class GrpcShardAdmin : public ShardAdmin {
 public:
  GrpcShardAdmin(const std::string& address, const OperatorIdentity& identity)
      : identity_(identity) {
    auto channel = NewChannel(address, identity.tls, kMaxMessageBytes);
    stub_ = v1::SidecarAdmin::NewStub(channel);
    sidecar_ = v1::Sidecar::NewStub(channel);
  }

  absl::StatusOr<uint64_t> Adopt(const SlotMap& map, int64_t drain_timeout_ms) override {
    v1::AdoptSlotMapRequest request;
    *request.mutable_map() = map.proto();
    request.set_drain_timeout_ms(drain_timeout_ms);
    v1::AdoptSlotMapResponse response;
    EONCE_RETURN_IF_ERROR(Call(&v1::SidecarAdmin::Stub::AdoptSlotMap, request, &response));
    return response.epoch();
  }

  absl::StatusOr<v1::ExportSlotsResponse> Export(const v1::ExportSlotsRequest& request) override {
    v1::ExportSlotsResponse response;
    EONCE_RETURN_IF_ERROR(Call(&v1::SidecarAdmin::Stub::ExportSlots, request, &response));
    return response;
  }

  absl::StatusOr<int64_t> Import(const v1::ImportSlotsRequest& request) override {
    v1::ImportSlotsResponse response;
    EONCE_RETURN_IF_ERROR(Call(&v1::SidecarAdmin::Stub::ImportSlots, request, &response));
    return response.imported();
  }

  absl::StatusOr<v1::SlotMap> Held() override {
    grpc::ClientContext context;
    context.set_deadline(WallIn(identity_.call_timeout_ms));
    v1::SlotMap map;
    grpc::Status status = sidecar_->GetSlotMap(&context, v1::GetSlotMapRequest(), &map);
    if (!status.ok()) return FromGrpcStatus(status, &context);
    return map;
  }

  absl::StatusOr<int64_t> Drop(uint32_t first, uint32_t last, uint64_t epoch) override {
    v1::DropSlotsRequest request;
    request.set_epoch(epoch);
    request.set_first_slot(first);
    request.set_last_slot(last);
    v1::DropSlotsResponse response;
    EONCE_RETURN_IF_ERROR(Call(&v1::SidecarAdmin::Stub::DropSlots, request, &response));
    return response.dropped();
  }

 private:
  template <typename Request, typename Response>
  absl::Status Call(grpc::Status (v1::SidecarAdmin::Stub::*method)(grpc::ClientContext*,
                                                                  const Request&, Response*),
                    const Request& request, Response* response) {
    grpc::ClientContext context;
    context.set_deadline(WallIn(identity_.call_timeout_ms));
    if (!identity_.tls.enabled()) {
      context.AddMetadata(kTenantHeader, identity_.tenant);
      context.AddMetadata(kOperatorHeader, identity_.operator_name);
    }
    grpc::Status status = ((*stub_).*method)(&context, request, response);
    return status.ok() ? absl::OkStatus() : FromGrpcStatus(status, &context);
  }

  const OperatorIdentity identity_;
  std::unique_ptr<v1::SidecarAdmin::Stub> stub_;
  std::unique_ptr<v1::Sidecar::Stub> sidecar_;
};

}  // namespace

ShardAdminFactory GrpcShardAdmins(OperatorIdentity identity) {
  return [identity](const std::string& address) -> std::unique_ptr<ShardAdmin> {
    return std::make_unique<GrpcShardAdmin>(address, identity);
  };
}

}  // namespace eonce
