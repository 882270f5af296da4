// The views of explain over gRPC: an outbox agent (eonce.v1.Agent) and a shard's sidecar
// (eonce.v1.SidecarAdmin, as an operator of the tenant: its audit, its parked records and
// its business's effects, which an operator may read only through the sidecar or at the
// business port). Each call has its own deadline; every scan has a page limit.
#ifndef EONCE_TOOLS_EXPLAIN_GRPC_VIEWS_H_
#define EONCE_TOOLS_EXPLAIN_GRPC_VIEWS_H_

#include <memory>
#include <string>
#include <vector>

#include "common/rpc/tls.h"
#include "tools/explain/views.h"

namespace eonce::explain {

struct Caller {
  std::string tenant;
  std::string operator_name;  // development mode; with mutual TLS the certificate says
  TlsFiles tls;
  int64_t timeout_ms = 5'000;
};

// Scans stop after this many records (agent) or effects (business): an explain never
// walks an unbounded store, and says so when it stopped early.
inline constexpr int kMaxRecordsScanned = 100'000;
inline constexpr int kMaxEffectsScanned = 1'000'000;

std::unique_ptr<AgentView> NewGrpcAgentView(const std::string& address, const Caller& caller);
std::unique_ptr<ShardView> NewGrpcShardView(const std::string& address, const Caller& caller);

// The sidecars to ask: each address given, and, for one that runs sharded, every shard its
// slot map names (GetSlotMap); in the order first met, without repeats. A sidecar that
// cannot be asked stays in the list (its reads then fail and say so).
std::vector<std::string> ExpandShards(const std::vector<std::string>& sidecars,
                                      const Caller& caller);

}  // namespace eonce::explain

#endif  // EONCE_TOOLS_EXPLAIN_GRPC_VIEWS_H_
