// EnqueueBatcher: a producer's many concurrent Enqueues to one agent, sent as EnqueueBatch
// calls (a CommandBatcher: common/rpc/command_batcher.h says how commands are grouped). Each
// command is answered as Enqueue would answer it, once it is durable in the outbox.
//
// Give every command its id before its first attempt (AssignCommandId), as the blocking
// client does: a command whose answer was lost (its batch failed with UNAVAILABLE or
// DEADLINE_EXCEEDED) is then safe to send again, and the agent answers the retry with
// the stored record (created = false).
#ifndef EONCE_OUTBOX_AGENT_CLIENT_ENQUEUE_BATCHER_H_
#define EONCE_OUTBOX_AGENT_CLIENT_ENQUEUE_BATCHER_H_

#include <atomic>
#include <cstdint>
#include <utility>

#include "common/rpc/call_tracker.h"
#include "common/base/clock.h"
#include "common/rpc/command_batcher.h"
#include "eonce/v1/agent.grpc.pb.h"

namespace eonce {

class EnqueueBatcher : public CommandBatcher<v1::EnqueueResponse, v1::EnqueueBatchResponse> {
 public:
  // Under the agent's message limit (gRPC's 4 MiB), with room for the call's framing.
  static constexpr size_t kMaxBatchBytes = (4 << 20) - (64 << 10);
  // Options with max_batch_bytes at kMaxBatchBytes.
  static Options DefaultOptions();

  // Sends each batch as one EnqueueBatch call on `stub`, due at the batch's deadline as
  // `clock` reads it. Both must outlive the batcher, whose end cancels the calls in
  // flight and waits until each one's state is gone (common/rpc/call_tracker.h), so that the
  // stub's channel may go right after it.
  EnqueueBatcher(Options options, v1::Agent::Stub& stub, Clock& clock);
  ~EnqueueBatcher() { calls_.CloseAndWait(); }

  // CommandBatcher::Add: `done` runs exactly once.
  void Enqueue(v1::Command command, int64_t deadline_ms, Done done) {
    Add(std::move(command), deadline_ms, std::move(done));
  }

  // The EnqueueBatch calls started so far.
  uint64_t calls_started() const { return calls_started_.load(std::memory_order_relaxed); }

 private:
  void Send(std::vector<v1::Command> commands, int64_t deadline_ms, BatchDone done);

  v1::Agent::Stub& stub_;
  Clock& clock_;
  std::atomic<uint64_t> calls_started_{0};
  CallTracker calls_;
};

}  // namespace eonce

#endif  // EONCE_OUTBOX_AGENT_CLIENT_ENQUEUE_BATCHER_H_
