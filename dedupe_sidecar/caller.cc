#include "dedupe_sidecar/caller.h"

#include <chrono>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/command.h"
#include "common/log.h"
#include "common/metadata.h"
#include "common/status.h"
#include "common/tls.h"

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
  auto deadline = context->deadline();
  auto now = std::chrono::system_clock::now();
  if (deadline < now + std::chrono::hours(24 * 365)) {
    caller.deadline_ms =
        clock.NowMs() +
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count();
  }
  caller.context = context;
  return caller;
}

absl::Status Draining() {
  return Error(absl::StatusCode::kUnavailable, "DRAINING", "the sidecar is shutting down");
}

}  // namespace eonce
