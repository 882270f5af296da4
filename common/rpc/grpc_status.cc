#include "common/rpc/grpc_status.h"

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/base/status.h"

namespace eonce {
namespace {

// "REASON: ..." of an UNAUTHENTICATED or PERMISSION_DENIED status without details; "" for
// any other.
std::string ReasonFromRefusalMessage(const grpc::Status& status) {
  if (status.error_code() != grpc::StatusCode::UNAUTHENTICATED &&
      status.error_code() != grpc::StatusCode::PERMISSION_DENIED) {
    return "";
  }
  const std::string& message = status.error_message();
  const size_t colon = message.find(": ");
  if (colon == std::string::npos || colon < 3 || colon > 64) return "";
  for (size_t i = 0; i < colon; ++i) {
    const char c = message[i];
    if (!((c >= 'A' && c <= 'Z') || c == '_' || (i > 0 && c >= '0' && c <= '9'))) return "";
  }
  return message.substr(0, colon);
}

}  // namespace

grpc::Status StatusOfResult(const v1::CallResult& result) {
  if (result.code() == 0) return grpc::Status::OK;
  const auto code = static_cast<absl::StatusCode>(result.code());
  return grpc::Status(static_cast<grpc::StatusCode>(result.code()), result.message(),
                      result.error_details().empty()
                          ? StatusDetails(absl::Status(code, result.message()))
                          : result.error_details());
}

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
                      std::string(status.message()), StatusDetails(status));
}

absl::Status StatusFromParts(int code, const std::string& message, const std::string& details) {
  if (code == 0) return absl::OkStatus();
  absl::Status out(static_cast<absl::StatusCode>(code), message);
  bool have_reason = false, have_retry = false;
  ApplyStatusDetails(details, &out, &have_reason, &have_retry);
  return out;
}

bool PastMessageLimit(const absl::Status& status) {
  if (status.code() != absl::StatusCode::kResourceExhausted) return false;
  const std::string reason = ReasonOf(status);
  return reason == "MESSAGE_TOO_LARGE" ||
         (reason.empty() && absl::StrContains(status.message(), "larger than max"));
}

absl::Status FromGrpcStatus(const grpc::Status& status, const grpc::ClientContext* context) {
  if (status.ok()) return absl::OkStatus();
  absl::Status out(static_cast<absl::StatusCode>(status.error_code()),
                   status.error_message());
  bool have_reason = false, have_retry = false;
  ApplyStatusDetails(status.error_details(), &out, &have_reason, &have_retry);
  if (!have_reason && status.error_details().empty()) {
    // Refused before any handler ran (a business port's caller gate), where gRPC sends a
    // message only: its reason comes first.
    if (std::string reason = ReasonFromRefusalMessage(status); !reason.empty()) {
      out = WithReason(out, reason);
      have_reason = true;
    }
  }
  if (context == nullptr) return out;
  const auto& trailers = context->GetServerTrailingMetadata();
  if (auto it = trailers.find(kReasonTrailer); !have_reason && it != trailers.end()) {
    out = WithReason(out, std::string(it->second.data(), it->second.size()));
  }
  if (auto it = trailers.find(kRetryAfterTrailer); !have_retry && it != trailers.end()) {
    int64_t ms = 0;
    if (absl::SimpleAtoi(std::string(it->second.data(), it->second.size()), &ms)) {
      out = WithRetryAfter(out, ms);
    }
  }
  return out;
}

}  // namespace eonce
