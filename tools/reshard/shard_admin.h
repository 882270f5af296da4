// ShardAdmin: what a slot move asks of one shard's sidecar (SidecarAdmin's slot calls).
// The real one is gRPC (grpc_shard_admin.h); tests of the mover alone may fake it.
#ifndef EONCE_TOOLS_RESHARD_SHARD_ADMIN_H_
#define EONCE_TOOLS_RESHARD_SHARD_ADMIN_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/coord/slots.h"
#include "eonce/v1/sidecar.pb.h"

namespace eonce {

class ShardAdmin {
 public:
  virtual ~ShardAdmin() = default;
  // AdoptSlotMap: the epoch held once the moved slots are drained.
  virtual absl::StatusOr<uint64_t> Adopt(const SlotMap& map, int64_t drain_timeout_ms) = 0;
  virtual absl::StatusOr<v1::ExportSlotsResponse> Export(const v1::ExportSlotsRequest& request) = 0;
  virtual absl::StatusOr<int64_t> Import(const v1::ImportSlotsRequest& request) = 0;
  // Refused unless the shard holds the map at `epoch` (0: not checked; see
  // DropSlotsRequest).
  virtual absl::StatusOr<int64_t> Drop(uint32_t first, uint32_t last, uint64_t epoch) = 0;
  // GetSlotMap: the map the sidecar holds.
  virtual absl::StatusOr<v1::SlotMap> Held() = 0;
};

// The admin of the sidecar at an address.
using ShardAdminFactory = std::function<std::unique_ptr<ShardAdmin>(const std::string& address)>;

}  // namespace eonce

#endif  // EONCE_TOOLS_RESHARD_SHARD_ADMIN_H_
