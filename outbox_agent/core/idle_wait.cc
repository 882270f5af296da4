#include "outbox_agent/core/idle_wait.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace eonce {

absl::Status ValidateIdleWait(const IdleWaitOptions& options) {
  if (options.max_wait_ms < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_idle_wait_ms: ", options.max_wait_ms, " must be at least 1"));
  }
  if (options.stuck_poll_ms < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("idle_pump_ms: ", options.stuck_poll_ms, " must be at least 1"));
  }
  return absl::OkStatus();
}

bool PeriodicWorkDue(int64_t now_ms, int64_t last_ms, int64_t every_ms) {
  return now_ms < last_ms || now_ms - last_ms >= every_ms;
}

int64_t IdleWaitMs(int64_t now_ms, std::optional<int64_t> next_due_ms, int64_t next_periodic_ms,
                   const IdleWaitOptions& options) {
  int64_t wait = std::max<int64_t>(options.max_wait_ms, 0);
  if (next_due_ms.has_value()) {
    // Due already: the pass that just ran could not start it (it pumps while it starts
    // anything), so it is looked at again after a short poll, not at once.
    wait = std::min(wait, *next_due_ms <= now_ms ? options.stuck_poll_ms : *next_due_ms - now_ms);
  }
  wait = std::min(wait, next_periodic_ms - now_ms);
  return std::max<int64_t>(wait, 0);
}

}  // namespace eonce
