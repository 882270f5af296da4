#include "outbox_agent/core/retry_policy.h"

#include <algorithm>

#include "common/base/status.h"

namespace eonce {
namespace {

struct Row {
  absl::StatusCode code;
  // nullptr: any reason; "": no reason at all; otherwise this reason.
  const char* reason;
  AnswerClass answer;
};

constexpr Row kClassification[] = {
    {absl::StatusCode::kAlreadyExists, nullptr, AnswerClass::kConflict},
    {absl::StatusCode::kUnavailable, "", AnswerClass::kUnknown},
    {absl::StatusCode::kUnavailable, nullptr, AnswerClass::kRetryable},
    {absl::StatusCode::kResourceExhausted, nullptr, AnswerClass::kRetryable},
    {absl::StatusCode::kDeadlineExceeded, nullptr, AnswerClass::kUnknown},
    {absl::StatusCode::kCancelled, nullptr, AnswerClass::kUnknown},
    // A batch answered with more or fewer answers than commands, or an answer fenced for
    // another command: the sidecar may have applied any of them.
    {absl::StatusCode::kInternal, "BATCH_MISMATCH", AnswerClass::kUnknown},
    {absl::StatusCode::kInternal, "ANSWER_MISMATCH", AnswerClass::kUnknown},
    {absl::StatusCode::kFailedPrecondition, "OUTCOME_UNKNOWN", AnswerClass::kParked},
    {absl::StatusCode::kFailedPrecondition, "RECORD_EXPIRED", AnswerClass::kExpired},
    {absl::StatusCode::kInvalidArgument, nullptr, AnswerClass::kRejected},
    {absl::StatusCode::kPermissionDenied, nullptr, AnswerClass::kRejected},
    {absl::StatusCode::kUnauthenticated, nullptr, AnswerClass::kUnauthenticated},
};

}  // namespace

const char* AnswerClassName(AnswerClass c) {
  switch (c) {
    case AnswerClass::kRetryable: return "retryable";
    case AnswerClass::kUnknown: return "unknown";
    case AnswerClass::kParked: return "parked";
    case AnswerClass::kConflict: return "conflict";
    case AnswerClass::kRejected: return "rejected";
    case AnswerClass::kExpired: return "expired";
    case AnswerClass::kUnauthenticated: return "unauthenticated";
    case AnswerClass::kUnclassified: return "unclassified";
  }
  return "unclassified";
}

AnswerClass Classify(const absl::Status& status) {
  std::string reason = ReasonOf(status);
  for (const Row& row : kClassification) {
    if (row.code != status.code()) continue;
    if (row.reason == nullptr || reason == row.reason) return row.answer;
  }
  return AnswerClass::kUnclassified;
}

int64_t Backoff::DelayMs(int attempt, int64_t server_retry_after_ms) {
  int shift = std::clamp(attempt - 1, 0, 30);
  int64_t ceiling = std::min(options_.max_backoff_ms, options_.base_backoff_ms << shift);
  int64_t delay = static_cast<int64_t>(random_.Uniform(static_cast<uint64_t>(ceiling) + 1));
  return std::max(delay, std::min(server_retry_after_ms, options_.max_backoff_ms));
}

}  // namespace eonce
