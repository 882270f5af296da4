#include "dedupe_sidecar/doors/caller.h"

#include <chrono>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/base/clock.h"
#include "common/command/command.h"
#include "common/base/log.h"
#include "common/rpc/metadata.h"
#include "common/base/status.h"
#include "common/rpc/tls.h"
#include "common/command/trace_context.h"

namespace eonce {

absl::StatusOr<Caller> CallerOf(grpc::CallbackServerContext* context, Clock& clock,
                                Deduper& deduper) {
  absl::StatusOr<std::string> tenant = CallerTenant(*context);
  if (!tenant.ok()) {
    deduper.CountDenied();
    LogWarn("caller refused",
            {{"reason", std::string(tenant.status().message())}, {"peer", context->peer()}});
    return tenant.status();
  }
  Caller caller;
  caller.tenant = std::move(*tenant);
  caller.workload = CallerWorkload(*context);
  caller.actor = RequestMetadata(*context, kActorHeader);
  caller.operator_name = CallerOperator(*context);
  const size_t max_name_bytes = CommandLimits().max_actor_bytes;
  using Named = std::pair<const char*, const std::string*>;
  for (const auto& [what, name] : {Named{"workload", &caller.workload},
                                   Named{"actor", &caller.actor},
                                   Named{"operator", &caller.operator_name}}) {
    if (name->size() > max_name_bytes) {
      deduper.CountDenied();
      return Error(absl::StatusCode::kInvalidArgument, "INVALID_FIELD",
                   absl::StrCat("the caller's ", what, " is longer than ", max_name_bytes,
                                " bytes"));
    }
  }
  caller.certificate_epoch = CertificateEpoch(*context);
  absl::SimpleAtoi(RequestMetadata(*context, kCredentialEpochHeader), &caller.credential_epoch);
  // A revoke rule names an operator as it names a workload: a revoked operator's
  // certificate does nothing here, a Submit or a pass-through read included (the policy's
  // act and allow rules look at workloads and actors, not at operators).
  if (absl::Status standing = deduper.RefuseRevokedOperator(caller); !standing.ok()) {
    return standing;
  }
  // gRPC's "no deadline" is the end of time; anything past a year counts as none.
  constexpr int64_t kNoDeadlineMs = 365LL * 24 * 3600 * 1000;
  if (const int64_t left_ms = MsUntilWall(context->deadline()); left_ms < kNoDeadlineMs) {
    caller.deadline_ms = clock.NowMs() + left_ms;
  }
  caller.trace.set_traceparent(RequestMetadata(*context, kTraceparentHeader));
  if (!caller.trace.traceparent().empty()) {
    caller.trace.set_tracestate(RequestMetadata(*context, kTracestateHeader));
    deduper.KeepTrace(&caller.trace);
  }
  caller.context = context;
  return caller;
}

absl::Status Draining() {
  return Error(absl::StatusCode::kUnavailable, "DRAINING", "the sidecar is shutting down");
}

}  // namespace eonce
