#include "dedupe_sidecar/caller.h"

#include <chrono>

#include "absl/strings/numbers.h"
#include "common/command.h"
#include "common/log.h"
#include "common/status.h"
#include "common/tls.h"

namespace eonce {

std::string Metadata(const grpc::ServerContextBase& context, const char* name) {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find(name);
  return it == metadata.end() ? "" : std::string(it->second.data(), it->second.size());
}

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
  caller.actor = Metadata(*context, kActorHeader);
  caller.operator_name = CallerOperator(*context);
  caller.certificate_epoch = CertificateEpoch(*context);
  absl::SimpleAtoi(Metadata(*context, kCredentialEpochHeader), &caller.credential_epoch);
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
