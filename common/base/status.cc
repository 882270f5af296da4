#include "common/base/status.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace eonce {

absl::Status WithReason(absl::Status status, absl::string_view reason) {
  if (!status.ok()) status.SetPayload(kReasonPayload, absl::Cord(reason));
  return status;
}

absl::Status WithRetryAfter(absl::Status status, int64_t retry_after_ms) {
  if (!status.ok()) {
    status.SetPayload(kRetryAfterPayload, absl::Cord(absl::StrCat(retry_after_ms)));
  }
  return status;
}

std::string ReasonOf(const absl::Status& status) {
  auto payload = status.GetPayload(kReasonPayload);
  return payload.has_value() ? std::string(*payload) : std::string();
}

std::optional<int64_t> RetryAfterOf(const absl::Status& status) {
  auto payload = status.GetPayload(kRetryAfterPayload);
  int64_t ms = 0;
  if (!payload.has_value() || !absl::SimpleAtoi(std::string(*payload), &ms)) {
    return std::nullopt;
  }
  return ms;
}

absl::Status WithErrorMetadata(absl::Status status, absl::string_view key,
                               absl::string_view value) {
  if (!status.ok()) {
    status.SetPayload(absl::StrCat(kMetadataPayloadPrefix, key), absl::Cord(value));
  }
  return status;
}

std::map<std::string, std::string> ErrorMetadataOf(const absl::Status& status) {
  std::map<std::string, std::string> out;
  status.ForEachPayload([&](absl::string_view url, const absl::Cord& value) {
    if (absl::StartsWith(url, kMetadataPayloadPrefix)) {
      out[std::string(url.substr(kMetadataPayloadPrefix.size()))] = std::string(value);
    }
  });
  return out;
}

std::string CodeName(int code) {
  std::string name =
      code >= 0 && code <= 16 ? absl::StatusCodeToString(static_cast<absl::StatusCode>(code)) : "";
  return name.empty() ? "UNKNOWN" : name;
}

absl::Status Error(absl::StatusCode code, absl::string_view reason,
                   absl::string_view message) {
  return WithReason(absl::Status(code, message), reason);
}

absl::Status FromRocks(const rocksdb::Status& status, absl::string_view what) {
  if (status.ok()) return absl::OkStatus();
  std::string message = absl::StrCat(what, ": ", status.ToString());
  if (status.IsNoSpace()) {
    return Error(absl::StatusCode::kResourceExhausted, "STORE_FULL", message);
  }
  if (status.IsNotFound()) return absl::NotFoundError(message);
  if (status.IsCorruption()) {
    return Error(absl::StatusCode::kDataLoss, "STORE_CORRUPT", message);
  }
  // RocksDB's InvalidArgument is about how the store was used (a closed family, bad
  // options), never about the caller's request: a store error, not a rejection.
  if (status.IsIOError() || status.IsBusy() || status.IsTimedOut() ||
      status.IsTryAgain() || status.IsShutdownInProgress()) {
    return Error(absl::StatusCode::kUnavailable, "STORE_ERROR", message);
  }
  return Error(absl::StatusCode::kInternal, "STORE_ERROR", message);
}

}  // namespace eonce
