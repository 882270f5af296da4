// Secure by default: whether a server may listen on an address, and how it then learns
// who its callers are. Every eonce server (sidecar, outbox agent, the business services,
// an embedded sidecar's listener) decides here, once per listening address, before it
// starts; a refusal is INVALID_ARGUMENT, on which the binaries exit 2.
//
// A listener serves callers one of three ways:
//   kCertificates    mutual TLS (--tls_cert, --tls_key, --tls_ca): identities come from
//                    the client certificates;
//   kLocalHeaders    plaintext on a unix socket (owner-only, common/rpc/server.h) or a loopback
//                    address (127.0.0.0/8, [::1], localhost): only this host's processes
//                    reach it, and identities come from request headers (eonce-tenant,
//                    eonce-workload, ...) -- local development, and the pod-local hop;
//   kInsecureHeaders plaintext on any other address (0.0.0.0, [::], a pod IP), only with
//                    --insecure: whoever reaches the port is whoever its headers say. It is
//                    logged as a warning at every start and exported as eonce_insecure 1.
// A plaintext TCP address that is not loopback is refused without --insecure, and
// --insecure beside TLS files is refused as a contradiction.
//
// The health-only port (--health_listen) and the Prometheus endpoint (--metrics_listen)
// are not decided here: they reveal no identity-bearing data and stay plaintext anywhere.
#ifndef EONCE_COMMON_RPC_SERVER_SECURITY_H_
#define EONCE_COMMON_RPC_SERVER_SECURITY_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/rpc/tls.h"
#include "prometheus/metric_family.h"

namespace eonce {

enum class ListenerTrust { kCertificates, kLocalHeaders, kInsecureHeaders };

struct ListenRules {
  // --insecure: plaintext is allowed on any address.
  bool insecure = false;
  // False where a plaintext TCP port is refused even on loopback, --insecure or not: the
  // business port of a ledger whose sidecar runs in its process, whose one door is a
  // unix socket or mutual TLS (any local process could otherwise claim to be its sidecar).
  bool plaintext_tcp = true;
};

// True for "unix:/path" and "unix:///path".
bool IsUnixSocketAddress(absl::string_view address);

// True for a TCP "host:port" whose host is a loopback address (127.0.0.0/8, ::1 or
// ::ffff:127.x.y.z, with or without brackets) or "localhost". An empty host, 0.0.0.0,
// [::], a name or any other address is not.
bool IsLoopbackAddress(absl::string_view address);

// The one decision. `flag` names the setting the address came from ("listen",
// "sidecar_listen"), for the message of a refusal.
absl::StatusOr<ListenerTrust> DecideListenerTrust(absl::string_view flag,
                                                  const std::string& address,
                                                  const TlsFiles& tls, const ListenRules& rules);

// Says once, at start, how `server`'s listener at `address` learns identities: a warning
// whenever `rules.insecure` is set (at every start, wherever it listens), a line for
// kLocalHeaders, nothing more for certificates.
void LogListenerTrust(absl::string_view server, const std::string& address, ListenerTrust trust,
                      const ListenRules& rules);

// The gauge eonce_insecure: 1 when the server runs with --insecure, 0 otherwise.
prometheus::MetricFamily InsecureGauge(bool insecure);

}  // namespace eonce

#endif  // EONCE_COMMON_RPC_SERVER_SECURITY_H_
