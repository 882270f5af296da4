#include "common/rpc/server_security.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/log.h"
#include "common/base/metrics.h"

namespace eonce {

bool IsUnixSocketAddress(absl::string_view address) {
  return absl::StartsWith(address, "unix:") && address.size() > 5;
}

bool IsLoopbackAddress(absl::string_view address) {
  if (absl::StartsWith(address, "unix")) return false;  // unix:, unix-abstract:
  size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos) return false;
  absl::string_view host = address.substr(0, colon);
  if (absl::StartsWith(host, "[") && absl::EndsWith(host, "]")) {
    host = host.substr(1, host.size() - 2);
  } else if (absl::StrContains(host, ':')) {
    // An IPv6 address without brackets ("::1:7100"): gRPC reads the whole of it as the
    // host, which is then another address than the one this split finds.
    return false;
  }
  if (host.empty()) return false;  // ":7100" is every interface
  if (absl::AsciiStrToLower(host) == "localhost") return true;
  const std::string text(host);
  in_addr v4;
  if (inet_pton(AF_INET, text.c_str(), &v4) == 1) {
    return (ntohl(v4.s_addr) >> 24) == 127;
  }
  in6_addr v6;
  if (inet_pton(AF_INET6, text.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
    return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
  }
  return false;  // a name other than localhost may resolve anywhere
}

absl::StatusOr<ListenerTrust> DecideListenerTrust(absl::string_view flag,
                                                  const std::string& address,
                                                  const TlsFiles& tls, const ListenRules& rules) {
  if (tls.enabled()) {
    if (rules.insecure) {
      return absl::InvalidArgumentError(
          "--insecure: not with --tls_cert, --tls_key, --tls_ca (mutual TLS is on); drop one");
    }
    return ListenerTrust::kCertificates;
  }
  if (IsUnixSocketAddress(address)) return ListenerTrust::kLocalHeaders;
  if (!rules.plaintext_tcp) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--", flag, "=", address,
        ": with the sidecar in this process the business port is a unix socket "
        "(--listen=unix:/path, the default) or mutual TLS (--tls_cert, --tls_key, --tls_ca); "
        "plaintext TCP is refused, loopback included, and --insecure does not change that"));
  }
  if (IsLoopbackAddress(address)) return ListenerTrust::kLocalHeaders;
  if (rules.insecure) return ListenerTrust::kInsecureHeaders;
  return absl::InvalidArgumentError(absl::StrCat(
      "--", flag, "=", address,
      " is reachable from other hosts: serve it with mutual TLS (--tls_cert, --tls_key, "
      "--tls_ca), listen on 127.0.0.1 or a unix:/path, or pass --insecure to trust identity "
      "headers from anyone who reaches it (development only)"));
}

void LogListenerTrust(absl::string_view server, const std::string& address, ListenerTrust trust,
                      const ListenRules& rules) {
  if (rules.insecure) {
    LogWarn(trust == ListenerTrust::kInsecureHeaders
                ? "INSECURE (--insecure): plaintext on an address other hosts can reach; "
                  "identities are taken from request headers, from anyone who reaches it"
                : "INSECURE (--insecure) is set; this listener is local, but any listener "
                  "this process opens on another address would trust request headers",
            {{"server", std::string(server)}, {"listen", address}});
    return;
  }
  if (trust == ListenerTrust::kLocalHeaders) {
    LogInfo("no TLS on a local listener (loopback or unix socket): identities come from "
            "request headers, as for local development and the pod-local hop",
            {{"server", std::string(server)}, {"listen", address}});
  }
}

prometheus::MetricFamily InsecureGauge(bool insecure) {
  return GaugeFamily("eonce_insecure",
                     "1 when this server runs with --insecure (plaintext on addresses other "
                     "hosts can reach, identities from request headers), 0 otherwise.",
                     {{{}, insecure ? 1.0 : 0.0}});
}

}  // namespace eonce
