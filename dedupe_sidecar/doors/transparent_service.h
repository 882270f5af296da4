// Transparent mode: a caller without an agent calls the business method on the sidecar
// itself. Only the business's own methods, as its reflected catalog lists them, are taken
// (an allowlist): eonce's services (eonce.v1.*) and gRPC's (grpc.*: health, reflection)
// are refused with PERMISSION_DENIED (RESERVED_METHOD) whatever the catalog says, a method
// the catalog does not list with UNIMPLEMENTED (UNKNOWN_METHOD), and while the catalog is
// not known yet with UNAVAILABLE (CATALOG_PENDING). With an idempotency-key header the
// call is a command (the Deduper's contract); without one it goes on only to a method the
// policy lists readonly, checked against the caller's identity and the policy like any
// other call. Every call is admitted first.
#ifndef EONCE_DEDUPE_SIDECAR_DOORS_TRANSPARENT_SERVICE_H_
#define EONCE_DEDUPE_SIDECAR_DOORS_TRANSPARENT_SERVICE_H_

#include <atomic>
#include <cstdint>

#include "common/rpc/admission.h"
#include "common/base/clock.h"
#include "dedupe_sidecar/core/deduper.h"
#include "dedupe_sidecar/authz/policy.h"
#include "dedupe_sidecar/upstream/upstream.h"
#include "grpcpp/generic/async_generic_service.h"

namespace eonce {

class TransparentService : public grpc::CallbackGenericService {
 public:
  TransparentService(Deduper& deduper, Upstream& upstream, PolicyStore& policy, Clock& clock,
                     bool refuse_unkeyed, int64_t forward_timeout_ms, std::atomic<bool>& draining,
                     Admission& admission)
      : deduper_(deduper),
        upstream_(upstream),
        policy_(policy),
        clock_(clock),
        refuse_unkeyed_(refuse_unkeyed),
        forward_timeout_ms_(forward_timeout_ms),
        draining_(draining),
        admission_(admission) {}

  grpc::ServerGenericBidiReactor* CreateReactor(
      grpc::GenericCallbackServerContext* context) override;

 private:
  Deduper& deduper_;
  Upstream& upstream_;
  PolicyStore& policy_;
  Clock& clock_;
  const bool refuse_unkeyed_;
  const int64_t forward_timeout_ms_;
  std::atomic<bool>& draining_;
  Admission& admission_;
};

}  // namespace eonce

#endif  // EONCE_DEDUPE_SIDECAR_DOORS_TRANSPARENT_SERVICE_H_
