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

}  // namespace eonce

#endif  // EONCE_OUTBOX_AGENT_STORE_STATES_H_
