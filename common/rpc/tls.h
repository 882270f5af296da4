// Mutual TLS for every eonce hop, from three PEM files: this process's certificate, its
// key, and the CA that signs its peers. gRPC's file watcher re-reads them every
// `refresh_s` seconds, so a rotated certificate (cert-manager rewriting a mounted Secret)
// is used for new connections without a restart; established connections keep theirs.
//
// Servers require and verify a client certificate; clients verify the server's
// certificate and its name; with a CRL directory, revoked certificates are refused too.
// With no files set, both sides fall back to plaintext, which a server allows on loopback
// and unix sockets only unless --insecure (common/rpc/server_security.h): the tenant then comes
// from the eonce-tenant header.
//
// The identity of an authenticated caller comes from its certificate, a URI SAN of the form
//   spiffe://<trust domain>/tenant/<tenant>/workload/<workload>   a workload (an agent, a service)
//   spiffe://<trust domain>/tenant/<tenant>/operator/<name>       an operator
//   spiffe://<trust domain>/eonce/<component>                     an eonce component: the
//                                                                 sidecar, a relay, ...
// (the older spiffe://<trust domain>/tenant/<tenant>/<workload> names a workload too;
// common/rpc/identity_uri.h parses them). A header that claims another tenant is refused with
// PERMISSION_DENIED. A component belongs to no tenant: a business port admits it, and
// operators, and no one else (services/inbox/caller_gate.h); the sidecar refuses it.
#ifndef EONCE_COMMON_RPC_TLS_H_
#define EONCE_COMMON_RPC_TLS_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/rpc/identity_uri.h"
#include "grpcpp/channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_context.h"

namespace eonce {

struct TlsFiles {
  std::string cert_file;
  std::string key_file;
  std::string ca_file;
  // How often the files are checked for changes.
  int refresh_s = 10;
  // A directory of hashed CRL files (`openssl rehash`); a peer certificate revoked there is
  // refused. Empty: no revocation list.
  std::string crl_dir;

  bool enabled() const {
    return !cert_file.empty() || !key_file.empty() || !ca_file.empty() || !crl_dir.empty();
  }
};

// All three files or none; each readable PEM. INVALID_ARGUMENT naming the setting.
absl::Status ValidateTlsFiles(const TlsFiles& files);

// mTLS server credentials (client certificate required and verified), or insecure ones
// when `files` is not enabled.
std::shared_ptr<grpc::ServerCredentials> ServerCredentials(const TlsFiles& files);

// mTLS channel credentials (the server's certificate and name verified), or insecure
// ones when `files` is not enabled.
std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials(const TlsFiles& files);

// A channel between eonce components: credentials from `files`, quick reconnects (100 ms
// to 1 s) and no gRPC-level retries (the caller owns retries: a transparent retry could
// re-send a mutation).
std::shared_ptr<grpc::Channel> NewChannel(const std::string& address, const TlsFiles& files,
                                          int max_message_bytes);

// The workload a caller is: from its client certificate when it has one (a certificate
// naming two workloads names none), else the eonce-workload header (development mode,
// where headers are trusted). Empty: the caller names no workload.
std::string CallerWorkload(const grpc::ServerContextBase& context);

// The credential epoch a client certificate carries, as a URI SAN
// "urn:eonce:credential-epoch:<n>"; nullopt for a caller without a certificate (whose
// epoch is whatever it says), 0 for a certificate that carries none (or two).
std::optional<int64_t> CertificateEpoch(const grpc::ServerContextBase& context);

// The operator a caller is: from its client certificate when it has one (a certificate
// naming two operators names none), else the eonce-operator header (development mode,
// where headers are trusted). Empty: not an operator.
std::string CallerOperator(const grpc::ServerContextBase& context);

// Who the caller acts for. For a caller authenticated by a client certificate: the
// certificate's tenant (PERMISSION_DENIED if it names none, or if the eonce-tenant
// header claims another). For a plaintext caller: the eonce-tenant header, possibly
// empty.
absl::StatusOr<std::string> CallerTenant(const grpc::ServerContextBase& context);

}  // namespace eonce

#endif  // EONCE_COMMON_RPC_TLS_H_
