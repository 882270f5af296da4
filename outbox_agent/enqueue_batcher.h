// EnqueueBatcher: a producer's many concurrent Enqueues to one agent, sent as EnqueueBatch
// calls (a CommandBatcher: common/command_batcher.h says how commands are grouped). Each
// command is answered as Enqueue would answer it, once it is durable in the outbox.
//
// Give every command its id before its first attempt (AssignCommandId), as the blocking
// client does: a command whose answer was lost (its batch failed with UNAVAILABLE or
// DEADLINE_EXCEEDED) is then safe to send again, and the agent answers the retry with
// the stored record (created = false).
#ifndef EONCE_OUTBOX_AGENT_ENQUEUE_BATCHER_H_
#define EONCE_OUTBOX_AGENT_ENQUEUE_BATCHER_H_

#include <cstdint>
#include <utility>

#include "common/clock.h"
#include "common/command_batcher.h"
#include "eonce/v1/agent.grpc.pb.h"

namespace eonce {

class EnqueueBatcher : public CommandBatcher<v1::EnqueueResponse, v1::EnqueueBatchResponse> {
 public:
  // Under the agent's message limit (gRPC's 4 MiB), with room for the call's framing.
  static constexpr size_t kMaxBatchBytes = (4 << 20) - (64 << 10);

  EnqueueBatcher(Options options, SendBatch send)
      : CommandBatcher("the agent", options, std::move(send)) {}

  // Sends each batch as one EnqueueBatch call on `stub`, due at the batch's deadline as
  // `clock` reads it. Both must outlive the batcher.
  static SendBatch Over(v1::Agent::Stub& stub, Clock& clock);
  // Options with max_batch_bytes at kMaxBatchBytes.
  static Options DefaultOptions();

  // CommandBatcher::Add: `done` runs exactly once.
  void Enqueue(v1::Command command, int64_t deadline_ms, Done done) {
    Add(std::move(command), deadline_ms, std::move(done));
  }
};

}  // namespace eonce

#endif  // EONCE_OUTBOX_AGENT_ENQUEUE_BATCHER_H_
