// The sidecar's gRPC services (eonce.v1.Sidecar and eonce.v1.SidecarAdmin) over the
// Deduper: who is calling (caller.h), admission, and the status each answer maps to.
// Transparent mode is transparent_service.h. Private to the sidecar server.
#ifndef EONCE_DEDUPE_SIDECAR_DOORS_SIDECAR_GRPC_H_
#define EONCE_DEDUPE_SIDECAR_DOORS_SIDECAR_GRPC_H_

#include <atomic>
#include <memory>

#include "common/rpc/admission.h"
#include "common/base/clock.h"
#include "common/base/work_pool.h"
#include "dedupe_sidecar/authz/audit_log.h"
#include "dedupe_sidecar/core/deduper.h"
#include "eonce/v1/sidecar.grpc.pb.h"

namespace eonce {

// Submit, SubmitBatch, Reconcile and GetInfo. `draining`: new calls get UNAVAILABLE
// (DRAINING); `identity_from_headers`: no mutual TLS (development), as GetInfo reports;
// `max_message_bytes`: the server's message limit, past which a batch's answer is
// RESOURCE_EXHAUSTED (MESSAGE_TOO_LARGE) instead.
std::unique_ptr<v1::Sidecar::CallbackService> NewSidecarService(Deduper& deduper, Clock& clock,
                                                                std::atomic<bool>& draining,
                                                                Admission& admission,
                                                                bool identity_from_headers,
                                                                int max_message_bytes);

// The operator's calls: parked records, their resolution, the audit log, the business's
// effects and outcomes (read from `upstream`, for the operator's tenant), and a sharded
// sidecar's slot map and slot moves. Long scans and blocking reads run on `pool`.
// `business`: where a move's business rows go (null: the business's data stays).
std::unique_ptr<v1::SidecarAdmin::CallbackService> NewSidecarAdminService(
    Deduper& deduper, RecordStore& records, AuditLog& audit, Clock& clock, WorkPool& pool,
    Upstream& upstream, Upstream* business = nullptr);

}  // namespace eonce

#endif  // EONCE_DEDUPE_SIDECAR_DOORS_SIDECAR_GRPC_H_
