// SubmitBatcher: a client's many concurrent Submits to one sidecar, sent as SubmitBatch
// calls (a CallBatcher of commands, at most kMaxBatchCommands each). A command goes at
// once while fewer than `max_calls` batches are in flight; the commands that arrive
// meanwhile wait for the next free call and go together. Alone, a command is never
// delayed; under load, one call's fixed cost is shared by many commands. Each command
// still gets its own answer, exactly once, on the thread that delivers its batch's answer.
#ifndef EONCE_COMMON_SUBMIT_BATCHER_H_
#define EONCE_COMMON_SUBMIT_BATCHER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "common/call_batcher.h"
#include "eonce/v1/command.pb.h"
#include "eonce/v1/sidecar.pb.h"

namespace eonce {

class SubmitBatcher {
 public:
  using Answer = absl::StatusOr<v1::SubmitResponse>;
  using Done = std::function<void(Answer)>;
  using Batcher = CallBatcher<v1::Command, Answer>;
  // The answer to one SubmitBatch call: the call's failure, or one answer per command
  // in the order sent.
  using BatchDone = Batcher::BatchDone;
  // Sends one SubmitBatch call, due by `deadline_ms` (the earliest of its commands'; 0:
  // none); `done` runs exactly once, possibly on another thread.
  using SendBatch =
      std::function<void(std::vector<v1::Command> commands, int64_t deadline_ms, BatchDone done)>;

  struct Options {
    int max_calls = 4;             // batches in flight at once
    int max_batch = 64;            // commands per batch (capped at kMaxBatchCommands)
    // Bytes of commands per batch, under the sidecar's message limit; a command larger
    // than this alone goes alone.
    size_t max_batch_bytes = 4 << 20;
    size_t max_waiting = 4096;     // commands queued for a free call; past it, refused
  };

  SubmitBatcher(Options options, SendBatch send);

  // A SubmitBatch answer as one Answer per command, in order: each item's response, or the
  // status it carries.
  static std::vector<Answer> AnswersOf(v1::SubmitBatchResponse& response);

  // `done` runs exactly once: with the command's own answer, with its batch's failure,
  // or at once with RESOURCE_EXHAUSTED (nothing sent) when max_waiting commands wait.
  // `deadline_ms`: when the command's answer is due (0: no deadline).
  void Submit(v1::Command command, int64_t deadline_ms, Done done) {
    batcher_.Add(std::move(command), deadline_ms, std::move(done));
  }

  // Nothing waits and no call is in flight.
  bool Idle() { return batcher_.Idle(); }

 private:
  Batcher batcher_;  // its destructor waits for the batches in flight
};

}  // namespace eonce

#endif  // EONCE_COMMON_SUBMIT_BATCHER_H_
