// Waiting for an outbox record to become final by following the agent's Watch stream,
// not by polling on a clock.
#ifndef EONCE_TESTS_UTIL_AGENT_WAIT_H_
#define EONCE_TESTS_UTIL_AGENT_WAIT_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "eonce/v1/agent.grpc.pb.h"

namespace eonce::testing {

// The record `command_id` once it is final (IsFinal). Opens Watch and waits for its headers
// (the subscription is then in place), then reads the
// record, then reads it again on every event that names it, until `timeout_ms` has
// passed (DEADLINE_EXCEEDED, with the last state seen in the message).
absl::StatusOr<v1::OutboxRecord> WaitUntilFinal(v1::Agent::Stub& agent,
                                                const std::string& command_id,
                                                int64_t timeout_ms = 10'000);

}  // namespace eonce::testing

#endif  // EONCE_TESTS_UTIL_AGENT_WAIT_H_
