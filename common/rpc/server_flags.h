// The flags every eonce server binary shares, beyond its own: mutual TLS (--tls_cert,
// --tls_key, --tls_ca, --tls_refresh_s), --insecure (plaintext on an address other hosts
// can reach: common/rpc/server_security.h), the health-only port (--health_listen) and the
// free-space reserve of its store (--min_free_mb).
#ifndef EONCE_COMMON_RPC_SERVER_FLAGS_H_
#define EONCE_COMMON_RPC_SERVER_FLAGS_H_

#include <cstdint>
#include <string>

#include "common/rpc/tls.h"

namespace eonce {

struct ServerFlags {
  TlsFiles tls;
  std::string health_address;
  uint64_t min_free_bytes = 0;
  bool insecure = false;
};

// Reads the flags; a negative reserve exits 2 naming the flag.
ServerFlags ServerFlagsFromFlags();

}  // namespace eonce

#endif  // EONCE_COMMON_RPC_SERVER_FLAGS_H_
