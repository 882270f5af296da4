#include "common/server_flags.h"

#include "absl/flags/flag.h"
#include "common/server.h"
#include "common/tls_flags.h"

ABSL_FLAG(std::string, health_listen, "",
          "plaintext grpc.health.v1-only port for probes without a client certificate "
          "(host:port); empty: none");
ABSL_FLAG(int32_t, min_free_mb, 256,
          "free disk space to keep for the store; below it writes are refused "
          "(RESOURCE_EXHAUSTED) and readiness is false until space returns");

namespace eonce {

ServerFlags ServerFlagsFromFlags() {
  ServerFlags flags;
  flags.tls = TlsFilesFromFlags();
  flags.health_address = absl::GetFlag(FLAGS_health_listen);
  flags.min_free_bytes = MebibytesFlag("min_free_mb", absl::GetFlag(FLAGS_min_free_mb));
  return flags;
}

}  // namespace eonce
