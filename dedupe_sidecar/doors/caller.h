// How the sidecar's gRPC services settle who is calling, once, at the transport boundary.
#ifndef EONCE_DEDUPE_SIDECAR_DOORS_CALLER_H_
#define EONCE_DEDUPE_SIDECAR_DOORS_CALLER_H_

#include <string>

#include "absl/status/statusor.h"
#include "common/base/clock.h"
#include "dedupe_sidecar/core/deduper.h"
#include "grpcpp/server_context.h"

namespace eonce {

// Who is calling: the tenant, the workload and the operator from the client certificate
// (or, on a plaintext port, the eonce-tenant, eonce-workload and eonce-operator headers),
// the actor it states, the credential epochs and the deadline.
// A caller whose certificate does not match the tenant it claims, or a revoked operator,
// is refused (counted as denied) before anything is read or written.
absl::StatusOr<Caller> CallerOf(grpc::CallbackServerContext* context, Clock& clock,
                                Deduper& deduper);

// The answer while the sidecar shuts down: UNAVAILABLE, reason DRAINING.
absl::Status Draining();

}  // namespace eonce

#endif  // EONCE_DEDUPE_SIDECAR_DOORS_CALLER_H_
