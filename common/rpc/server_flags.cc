#include "common/rpc/server_flags.h"

#include "absl/flags/flag.h"
#include "common/rpc/server.h"
#include "common/rpc/tls_flags.h"

ABSL_FLAG(std::string, health_listen, "",
          "a plaintext port serving grpc.health.v1 only, for probes without a client "
          "certificate (host:port, any address: it reveals readiness and nothing else, so "
          "it needs neither TLS nor --insecure); empty: none");
ABSL_FLAG(bool, insecure, false,
          "serve without mutual TLS on an address other hosts can reach (0.0.0.0, [::], a "
          "pod IP), trusting the identity headers (eonce-tenant, eonce-workload, ...) of "
          "anyone who reaches it: development only, warned at every start and exported as "
          "eonce_insecure 1. Without it such an address needs --tls_cert, --tls_key and "
          "--tls_ca; loopback and unix sockets need neither");
ABSL_FLAG(int32_t, min_free_mb, 256,
          "free disk space to keep for the store; below it writes are refused "
          "(RESOURCE_EXHAUSTED) and readiness is false until space returns");

namespace eonce {

ServerFlags ServerFlagsFromFlags() {
  ServerFlags flags;
  flags.tls = TlsFilesFromFlags();
  flags.health_address = absl::GetFlag(FLAGS_health_listen);
  flags.insecure = absl::GetFlag(FLAGS_insecure);
  flags.min_free_bytes = MebibytesFlag("min_free_mb", absl::GetFlag(FLAGS_min_free_mb));
  return flags;
}

}  // namespace eonce
