// Reading a call's request metadata, in one place.
#ifndef EONCE_COMMON_RPC_METADATA_H_
#define EONCE_COMMON_RPC_METADATA_H_

#include <string>

#include "absl/strings/string_view.h"
#include "grpcpp/server_context.h"

namespace eonce {

// The value of request header `name` (lower case); empty when absent. If a header is
// sent twice, the first value.
std::string RequestMetadata(const grpc::ServerContextBase& context, absl::string_view name);

}  // namespace eonce

#endif  // EONCE_COMMON_RPC_METADATA_H_
