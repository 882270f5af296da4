// RetryPolicy: how the agent classifies an answer and when it tries again.
//
// The classification is a table (kClassification in retry_policy.cc), read top to
// bottom; the first row whose code and reason match wins:
//
//   code                 reason                 class
//   ALREADY_EXISTS       *                      conflict (terminal): IDEMPOTENCY_CONFLICT,
//                                               KEY_REUSED
//   UNAVAILABLE          (a sidecar reason)     retryable, honouring its retry delay
//   UNAVAILABLE          (none: the transport)  unknown outcome -> reconcile first
//   RESOURCE_EXHAUSTED   *                      retryable, with pushback
//   DEADLINE_EXCEEDED    *                      unknown outcome
//   CANCELLED            *                      unknown outcome
//   INTERNAL             BATCH_MISMATCH,        unknown outcome: a batch's answers did not
//                        ANSWER_MISMATCH        match its commands (count, command id)
//   FAILED_PRECONDITION  OUTCOME_UNKNOWN        parked at the sidecar: unknown, slow retry
//   FAILED_PRECONDITION  RECORD_EXPIRED         expired
//   INVALID_ARGUMENT     *                      rejected (terminal), UPSTREAM_UNIMPLEMENTED
//                                               included
//   PERMISSION_DENIED    *                      rejected (terminal)
//   UNAUTHENTICATED      *                      pause all replay until renewed
//   anything else                               unclassified: retry, dead-letter after
//                                               max_unclassified of them (UPSTREAM_REFUSED,
//                                               a store's INTERNAL STORE_ERROR)
//
// Backoff is "full jitter": a uniform draw in [0, min(max, base * 2^attempt)], never
// below the server's retry delay. Randomness is injected, so tests are deterministic.
#ifndef EONCE_OUTBOX_AGENT_CORE_RETRY_POLICY_H_
#define EONCE_OUTBOX_AGENT_CORE_RETRY_POLICY_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "common/base/random.h"

namespace eonce {

enum class AnswerClass {
  kRetryable,
  kUnknown,
  kParked,
  kConflict,
  kRejected,
  kExpired,
  kUnauthenticated,
  kUnclassified,
};

const char* AnswerClassName(AnswerClass c);

// Classifies a failed Submit or Reconcile (a non-OK status with its eonce-reason).
AnswerClass Classify(const absl::Status& status);

struct RetryOptions {
  int max_attempts = 100;
  // Records older than this are dead-lettered; must be shorter than the sidecar's
  // retention minus the safety margin (checked at startup).
  int64_t max_age_ms = 6LL * 24 * 3600 * 1000;
  int64_t base_backoff_ms = 100;
  int64_t max_backoff_ms = 30'000;
  // How long before the sidecar's retention ends the agent stops sending a record.
  int64_t retention_margin_ms = 12LL * 3600 * 1000;
  // Unclassified failures before a record is treated as poison and dead-lettered.
  int max_unclassified = 5;
  // The retry delay for a command parked at the sidecar (an operator must act first).
  int64_t parked_recheck_ms = 60'000;
};

class Backoff {
 public:
  Backoff(const RetryOptions& options, Random& random) : options_(options), random_(random) {}
  // The delay before attempt number `attempt` + 1 (attempt counts from 1).
  int64_t DelayMs(int attempt, int64_t server_retry_after_ms = 0);

 private:
  const RetryOptions options_;
  Random& random_;
};

}  // namespace eonce

#endif  // EONCE_OUTBOX_AGENT_CORE_RETRY_POLICY_H_
