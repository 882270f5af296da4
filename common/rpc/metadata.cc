#include "common/rpc/metadata.h"

namespace eonce {

std::string RequestMetadata(const grpc::ServerContextBase& context, absl::string_view name) {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find(grpc::string_ref(name.data(), name.size()));
  return it == metadata.end() ? "" : std::string(it->second.data(), it->second.size());
}

}  // namespace eonce
