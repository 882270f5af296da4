// IdleWaitMs: how long the agent's replay loop sleeps after a pass that could start
// nothing more, when nothing wakes it sooner. An Enqueue, an attempt's end and a new
// credential wake it at once (AgentServer::Kick); the wait covers what only time brings:
// a retry's or a dead worker's claim's due time (the outbox's next due time), and the
// loop's own periodic work (the readiness probe and the credential file, each second by
// default).
// It is the time to the earliest of those, so an empty outbox wakes the loop once a
// second rather than on a fixed short timer; bounded by `max_wait_ms`, so that whatever
// was missed (a kick left out because nothing could start) waits no longer than that.
// Something due already that the pass could not start (every slot taken, its lane busy,
// its sidecar's retention not yet known, the credential paused) is looked at again after
// `stuck_poll_ms`, as the fixed timer did. A pure function, for the loop and its tests.
#ifndef EONCE_OUTBOX_AGENT_CORE_IDLE_WAIT_H_
#define EONCE_OUTBOX_AGENT_CORE_IDLE_WAIT_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"

namespace eonce {

struct IdleWaitOptions {
  // The next look at what is due already but could not start.
  int64_t stuck_poll_ms = 20;
  // The longest the loop sleeps when nothing wakes it.
  int64_t max_wait_ms = 1'000;
};

// INVALID_ARGUMENT naming the flag when a wait is not positive (the loop would spin).
absl::Status ValidateIdleWait(const IdleWaitOptions& options);

// Whether the loop's periodic work (last done at `last_ms`) is due at `now_ms`: every
// `every_ms`, and at once when the clock went back past `last_ms` (a wall clock stepped
// back must not stop the probe and the credential file for as long as the step).
bool PeriodicWorkDue(int64_t now_ms, int64_t last_ms, int64_t every_ms);

// The wait at `now_ms`, with the outbox's earliest due time `next_due_ms` (none when
// nothing waits) and the loop's next periodic work at `next_periodic_ms`. In
// [0, max_wait_ms].
int64_t IdleWaitMs(int64_t now_ms, std::optional<int64_t> next_due_ms, int64_t next_periodic_ms,
                   const IdleWaitOptions& options);

}  // namespace eonce

#endif  // EONCE_OUTBOX_AGENT_CORE_IDLE_WAIT_H_
