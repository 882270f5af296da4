#include "outbox_agent/core/retry_policy.h"

#include "common/base/status.h"
#include "gtest/gtest.h"

namespace eonce {
namespace {

absl::Status With(absl::StatusCode code, const char* reason) {
  return reason == nullptr ? absl::Status(code, "x") : Error(code, reason, "x");
}

TEST(ClassifyTest, TheTable) {
  struct Row {
    absl::StatusCode code;
    const char* reason;
    AnswerClass expected;
  } rows[] = {
      {absl::StatusCode::kAlreadyExists, "IDEMPOTENCY_CONFLICT", AnswerClass::kConflict},
      {absl::StatusCode::kUnavailable, "IN_PROGRESS", AnswerClass::kRetryable},
      {absl::StatusCode::kUnavailable, "OUTCOME_PENDING", AnswerClass::kRetryable},
      {absl::StatusCode::kUnavailable, "DRAINING", AnswerClass::kRetryable},
      {absl::StatusCode::kUnavailable, nullptr, AnswerClass::kUnknown},
      {absl::StatusCode::kResourceExhausted, nullptr, AnswerClass::kRetryable},
      {absl::StatusCode::kDeadlineExceeded, nullptr, AnswerClass::kUnknown},
      {absl::StatusCode::kCancelled, nullptr, AnswerClass::kUnknown},
      {absl::StatusCode::kFailedPrecondition, "OUTCOME_UNKNOWN", AnswerClass::kParked},
      {absl::StatusCode::kFailedPrecondition, "RECORD_EXPIRED", AnswerClass::kExpired},
      {absl::StatusCode::kFailedPrecondition, "NO_ROUTE", AnswerClass::kUnclassified},
      {absl::StatusCode::kInvalidArgument, "INVALID_FIELD", AnswerClass::kRejected},
      {absl::StatusCode::kPermissionDenied, "CREDENTIAL_REVOKED", AnswerClass::kRejected},
      {absl::StatusCode::kUnauthenticated, "NO_IDENTITY", AnswerClass::kUnauthenticated},
      {absl::StatusCode::kInternal, "BATCH_MISMATCH", AnswerClass::kUnknown},
      {absl::StatusCode::kInternal, "ANSWER_MISMATCH", AnswerClass::kUnknown},
      {absl::StatusCode::kInternal, nullptr, AnswerClass::kUnclassified},
      {absl::StatusCode::kDataLoss, nullptr, AnswerClass::kUnclassified},
  };
  for (const Row& row : rows) {
    EXPECT_EQ(Classify(With(row.code, row.reason)), row.expected)
        << absl::StatusCodeToString(row.code) << " " << (row.reason ? row.reason : "(none)");
  }
}

TEST(BackoffTest, FullJitterStaysWithinItsCeilingAndIsReproducible) {
  RetryOptions options;
  options.base_backoff_ms = 100;
  options.max_backoff_ms = 5'000;
  SeededRandom a(42), b(42);
  Backoff first(options, a), second(options, b);
  for (int attempt = 1; attempt <= 20; ++attempt) {
    int64_t ceiling = std::min<int64_t>(5'000, 100LL << (attempt - 1));
    int64_t min_seen = ceiling, max_seen = 0;
    for (int i = 0; i < 200; ++i) {
      int64_t d = first.DelayMs(attempt);
      EXPECT_EQ(d, second.DelayMs(attempt));  // same seed, same delays
      EXPECT_GE(d, 0);
      EXPECT_LE(d, ceiling);
      min_seen = std::min(min_seen, d);
      max_seen = std::max(max_seen, d);
    }
    // Full jitter spreads over the whole range, not a band near the ceiling.
    EXPECT_LT(min_seen, ceiling / 4 + 1) << attempt;
    EXPECT_GT(max_seen, ceiling * 3 / 4) << attempt;
  }
}

TEST(BackoffTest, ServerRetryDelayIsAFloorCappedByTheMaximum) {
  RetryOptions options;
  options.base_backoff_ms = 10;
  options.max_backoff_ms = 1'000;
  SeededRandom random(7);
  Backoff backoff(options, random);
  for (int i = 0; i < 100; ++i) EXPECT_GE(backoff.DelayMs(1, 700), 700);
  for (int i = 0; i < 100; ++i) EXPECT_LE(backoff.DelayMs(1, 99'000), 1'000);
}

}  // namespace
}  // namespace eonce
