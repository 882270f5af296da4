// The outbox record's attempt log: what each attempt's answer did to the record (its code
// and reason, the state it left, the backoff until the next attempt), so that an operator
// can tell a command's story without the agent's logs (`eonce explain`). The transition
// history alone does not say it: it keeps only state changes, and a run of retries is
// RETRYABLE_FAILED -> CLAIMED -> SENDING over and over, each with no backoff.
//
// Bounded: a record keeps the last kAttemptLogLimit answers, so that a command retried for
// days does not grow its record with every attempt.
#ifndef EONCE_OUTBOX_AGENT_CORE_ATTEMPT_LOG_H_
#define EONCE_OUTBOX_AGENT_CORE_ATTEMPT_LOG_H_

#include <cstdint>
#include <string>

#include "eonce/v1/agent.pb.h"

namespace eonce {

inline constexpr int kAttemptLogLimit = 16;

// Appends the answer `code` / `reason` taken at `now_ms` to `record`, after the answer's
// change set its state and next_attempt_at_ms; drops the oldest past the limit.
void LogAttempt(v1::OutboxRecord* record, int64_t now_ms, int code, const std::string& reason);

}  // namespace eonce

#endif  // EONCE_OUTBOX_AGENT_CORE_ATTEMPT_LOG_H_
