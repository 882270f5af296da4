// The identities a client certificate's URI SANs name, parsed without gRPC (so the fuzz
// targets and tools can use it):
//   spiffe://<trust domain>/tenant/<tenant>/workload/<workload>   a workload
//   spiffe://<trust domain>/tenant/<tenant>/operator/<name>       an operator
//   spiffe://<trust domain>/tenant/<tenant>/<workload>            a workload (older form)
//   spiffe://<trust domain>/eonce/<component>                     an eonce component (the
//                                                                 sidecar, a relay, ...)
//   urn:eonce:credential-epoch:<n>                                the credential epoch
// Each function returns the empty string (or nullopt) for a URI that names no such thing.
#ifndef EONCE_COMMON_RPC_IDENTITY_URI_H_
#define EONCE_COMMON_RPC_IDENTITY_URI_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace eonce {

std::string TenantFromSpiffeId(absl::string_view spiffe_id);
std::string WorkloadFromSpiffeId(absl::string_view spiffe_id);
std::string OperatorFromSpiffeId(absl::string_view spiffe_id);
// The component an eonce component's id names ("sidecar", "relay"); it belongs to no
// tenant, and a business port lets it state any tenant it acts for.
std::string ComponentFromSpiffeId(absl::string_view spiffe_id);
// A positive epoch; nullopt for anything else.
std::optional<int64_t> EpochFromUri(absl::string_view uri);

}  // namespace eonce

#endif  // EONCE_COMMON_RPC_IDENTITY_URI_H_
