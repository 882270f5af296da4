#include "outbox_agent/core/attempt_log.h"

#include <algorithm>

namespace eonce {

void LogAttempt(v1::OutboxRecord* record, int64_t now_ms, int code, const std::string& reason) {
  v1::AttemptRecord* a = record->add_attempts();
  a->set_attempt(record->attempt());
  a->set_at_ms(now_ms);
  a->set_code(code);
  a->set_reason(reason.substr(0, 128));
  a->set_span_id(record->attempt_span_id());
  a->set_state(record->state());
  // Only a state that will be tried again has a backoff; a final one keeps the stale
  // next_attempt_at_ms of the attempt before.
  const bool retried = record->state() == v1::RETRYABLE_FAILED || record->state() == v1::UNKNOWN;
  a->set_backoff_ms(retried ? std::max<int64_t>(0, record->next_attempt_at_ms() - now_ms) : 0);
  const int excess = record->attempts_size() - kAttemptLogLimit;
  if (excess > 0) record->mutable_attempts()->DeleteSubrange(0, excess);
}

}  // namespace eonce
