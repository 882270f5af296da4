// What an outbox record's state means to someone watching it from outside: enough for a
// producer, a tool or a black-box test, without the store.
#ifndef EONCE_OUTBOX_AGENT_STORE_STATES_H_
#define EONCE_OUTBOX_AGENT_STORE_STATES_H_

#include "eonce/v1/agent.pb.h"

namespace eonce {

// Final for the outbox: the record will not be sent again unless an operator acts.
inline bool IsFinal(v1::OutboxState state) {
  return state == v1::ACKED || state == v1::CONFLICT || state == v1::REJECTED ||
         state == v1::DEAD_LETTERED || state == v1::EXPIRED || state == v1::DROPPED;
}

// A Watch of the final states alone: its watcher is not woken by the steps before.
inline v1::WatchRequest WatchFinalStates() {
  v1::WatchRequest request;
  for (int s = 0; s < v1::OutboxState_ARRAYSIZE; ++s) {
    if (v1::OutboxState_IsValid(s) && IsFinal(static_cast<v1::OutboxState>(s))) {
      request.add_states(static_cast<v1::OutboxState>(s));
    }
  }
  return request;
}

}  // namespace eonce

#endif  // EONCE_OUTBOX_AGENT_STORE_STATES_H_
