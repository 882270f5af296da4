#include "common/grpc_status.h"

#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace eonce {

grpc::Status ToGrpcStatus(const absl::Status& status, grpc::ServerContextBase* context) {
  if (status.ok()) return grpc::Status::OK;
  if (context != nullptr) {
    std::string reason = ReasonOf(status);
    if (!reason.empty()) context->AddTrailingMetadata(kReasonTrailer, reason);
    if (auto retry = RetryAfterOf(status); retry.has_value()) {
      context->AddTrailingMetadata(kRetryAfterTrailer, absl::StrCat(*retry));
    }
  }
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status, const grpc::ClientContext* context) {
  if (status.ok()) return absl::OkStatus();
  absl::Status out(static_cast<absl::StatusCode>(status.error_code()),
                   status.error_message());
  if (context == nullptr) return out;
  const auto& trailers = context->GetServerTrailingMetadata();
  if (auto it = trailers.find(kReasonTrailer); it != trailers.end()) {
    out = WithReason(out, std::string(it->second.data(), it->second.size()));
  }
  if (auto it = trailers.find(kRetryAfterTrailer); it != trailers.end()) {
    int64_t ms = 0;
    if (absl::SimpleAtoi(std::string(it->second.data(), it->second.size()), &ms)) {
      out = WithRetryAfter(out, ms);
    }
  }
  return out;
}

}  // namespace eonce
