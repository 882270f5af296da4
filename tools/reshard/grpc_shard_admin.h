// ShardAdmin over gRPC, as a platform operator: with mutual TLS the operator comes from
// the client certificate; without it (development), from the tenant and operator headers.
#ifndef EONCE_TOOLS_RESHARD_GRPC_SHARD_ADMIN_H_
#define EONCE_TOOLS_RESHARD_GRPC_SHARD_ADMIN_H_

#include <string>

#include "common/rpc/tls.h"
#include "tools/reshard/shard_admin.h"

namespace eonce {

struct OperatorIdentity {
  std::string tenant;
  std::string operator_name;
  TlsFiles tls;
  int64_t call_timeout_ms = 60'000;
};

ShardAdminFactory GrpcShardAdmins(OperatorIdentity identity);

}  // namespace eonce

#endif  // EONCE_TOOLS_RESHARD_GRPC_SHARD_ADMIN_H_
