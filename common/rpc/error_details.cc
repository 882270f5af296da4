#include "common/rpc/error_details.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "common/base/status.h"
#include "google/rpc/error_details.pb.h"
#include "google/rpc/status.pb.h"

namespace eonce {
namespace {

constexpr char kTypePrefix[] = "type.googleapis.com/";

bool Retryable(absl::StatusCode code) {
  return code == absl::StatusCode::kUnavailable || code == absl::StatusCode::kAborted;
}

void Pack(const google::protobuf::Message& message, google::rpc::Status* rich) {
  google::protobuf::Any* any = rich->add_details();
  any->set_type_url(absl::StrCat(kTypePrefix, message.GetDescriptor()->full_name()));
  any->set_value(message.SerializeAsString());
}

template <typename T>
bool Unpack(const google::protobuf::Any& any, T* out) {
  return any.type_url() == absl::StrCat(kTypePrefix, T::descriptor()->full_name()) &&
         out->ParseFromString(any.value());
}

google::rpc::Status RichStatus(const absl::Status& status) {
  google::rpc::Status rich;
  rich.set_code(static_cast<int>(status.code()));
  rich.set_message(std::string(status.message()));
  google::rpc::ErrorInfo info;
  std::string reason = ReasonOf(status);
  info.set_reason(reason.empty() ? CodeName(static_cast<int>(status.code())) : reason);
  info.set_domain(kErrorDomain);
  for (const auto& [key, value] : ErrorMetadataOf(status)) (*info.mutable_metadata())[key] = value;
  Pack(info, &rich);
  std::optional<int64_t> retry = RetryAfterOf(status);
  if (!retry.has_value() && Retryable(status.code())) retry = kDefaultRetryAfterMs;
  if (retry.has_value()) {
    google::rpc::RetryInfo retry_info;
    retry_info.mutable_retry_delay()->set_seconds(*retry / 1000);
    retry_info.mutable_retry_delay()->set_nanos(static_cast<int32_t>(*retry % 1000) * 1'000'000);
    Pack(retry_info, &rich);
  }
  return rich;
}

}  // namespace

std::string StatusDetails(const absl::Status& status) {
  return RichStatus(status).SerializeAsString();
}

std::string RejectionStatusDetails(absl::StatusCode code, const std::string& message,
                                   const v1::Rejection& rejection) {
  google::rpc::Status rich =
      RichStatus(WithReason(absl::Status(code, message), rejection.reason()));
  Pack(rejection, &rich);
  return rich.SerializeAsString();
}

std::optional<v1::Rejection> RejectionOf(const std::string& details) {
  if (details.empty()) return std::nullopt;
  google::rpc::Status rich;
  if (rich.ParseFromString(details)) {
    for (const auto& any : rich.details()) {
      v1::Rejection rejection;
      if (Unpack(any, &rejection)) return rejection;
    }
    if (rich.details_size() > 0) return std::nullopt;
  }
  v1::Rejection bare;
  if (bare.ParseFromString(details) && !bare.reason().empty()) return bare;
  return std::nullopt;
}

bool ApplyStatusDetails(const std::string& details, absl::Status* status, bool* has_reason,
                        bool* has_retry) {
  *has_reason = *has_retry = false;
  google::rpc::Status rich;
  if (details.empty() || !rich.ParseFromString(details)) return false;
  for (const auto& any : rich.details()) {
    google::rpc::ErrorInfo info;
    google::rpc::RetryInfo retry;
    if (Unpack(any, &info)) {
      if (!info.reason().empty()) {
        *status = WithReason(*status, info.reason());
        *has_reason = true;
      }
      for (const auto& [key, value] : info.metadata()) {
        *status = WithErrorMetadata(*status, key, value);
      }
    } else if (Unpack(any, &retry)) {
      *status = WithRetryAfter(*status, retry.retry_delay().seconds() * 1000 +
                                            retry.retry_delay().nanos() / 1'000'000);
      *has_retry = true;
    }
  }
  return true;
}

}  // namespace eonce
