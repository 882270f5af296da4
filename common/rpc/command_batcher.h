// CommandBatcher: a client's many concurrent commands to one peer, sent as batch calls of
// commands (a CallBatcher, at most kMaxBatchCommands each): SubmitBatch to a sidecar
// (common/rpc/submit_batcher.h), EnqueueBatch to an agent (outbox_agent/client/enqueue_batcher.h). A
// command goes at once while fewer than `max_calls` batches are in flight; the commands
// that arrive meanwhile wait for the next free call and go together. Alone, a command is
// never delayed; under load, one call's fixed cost is shared by many commands. Each
// command still gets its own answer, exactly once, on the thread that delivers its
// batch's answer.
#ifndef EONCE_COMMON_RPC_COMMAND_BATCHER_H_
#define EONCE_COMMON_RPC_COMMAND_BATCHER_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/rpc/call_batcher.h"
#include "common/command/command.h"
#include "common/rpc/grpc_status.h"
#include "eonce/v1/command.pb.h"

namespace eonce {

// `Response` answers one command; `BatchResponse` has `items`, each with `code`,
// `message`, `error_details` and `response` (SubmitBatchItem, EnqueueBatchItem).
template <typename Response, typename BatchResponse>
class CommandBatcher {
 public:
  using Answer = absl::StatusOr<Response>;
  using Done = std::function<void(Answer)>;
  using Batcher = CallBatcher<v1::Command, Answer>;
  // The answer to one batch call: the call's failure, or one answer per command in the
  // order sent.
  using BatchDone = typename Batcher::BatchDone;
  // Sends one batch call, due by `deadline_ms` (the earliest of its commands'; 0: none);
  // `done` runs exactly once, possibly on another thread.
  using SendBatch =
      std::function<void(std::vector<v1::Command> commands, int64_t deadline_ms, BatchDone done)>;

  struct Options {
    int max_calls = 4;             // batches in flight at once
    int max_batch = 64;            // commands per batch (capped at kMaxBatchCommands)
    // Bytes of commands per batch, under the peer's message limit; a command larger
    // than this alone goes alone.
    size_t max_batch_bytes = 4 << 20;
    size_t max_waiting = 4096;     // commands queued for a free call; past it, refused
  };

  // `peer` names the peer in errors ("the sidecar").
  CommandBatcher(std::string peer, Options options, SendBatch send)
      : batcher_(std::move(peer), BatcherOptions(options),
                 typename Batcher::Hooks{
                     std::move(send),
                     [](const v1::Command& command) { return command.ByteSizeLong(); },
                     [](const absl::Status& status) { return Answer(status); },
                     [](const absl::Status& status) { return Answer(status); }}) {}

  // A batch call's answer as one Answer per command, in order: each item's response, or
  // the status it carries.
  static std::vector<Answer> AnswersOf(BatchResponse& response) {
    std::vector<Answer> answers;
    answers.reserve(response.items_size());
    for (auto& item : *response.mutable_items()) {
      if (item.code() == 0) {
        answers.emplace_back(std::move(*item.mutable_response()));
      } else {
        answers.emplace_back(StatusFromParts(item.code(), item.message(), item.error_details()));
      }
    }
    return answers;
  }

  // `done` runs exactly once: with the command's own answer, with its batch's failure,
  // or at once with RESOURCE_EXHAUSTED (nothing sent) when max_waiting commands wait.
  // `deadline_ms`: when the command's answer is due (0: no deadline).
  void Add(v1::Command command, int64_t deadline_ms, Done done) {
    batcher_.Add(std::move(command), deadline_ms, std::move(done));
  }

  // Several commands handed over together, which leave together (CallBatcher::AddMany):
  // each `done` runs exactly once, as Add's does.
  using Entry = typename Batcher::Waiting;
  void AddMany(std::vector<Entry> entries) { batcher_.AddMany(std::move(entries)); }

  // Nothing waits and no call is in flight.
  bool Idle() { return batcher_.Idle(); }

 private:
  static CallBatcherOptions BatcherOptions(const Options& options) {
    CallBatcherOptions out;
    out.max_calls = options.max_calls;
    out.max_batch = std::clamp(options.max_batch, 1, kMaxBatchCommands);
    out.max_batch_bytes = options.max_batch_bytes;
    out.max_waiting = options.max_waiting;
    return out;
  }

  Batcher batcher_;  // its destructor waits for the batches in flight
};

}  // namespace eonce

#endif  // EONCE_COMMON_RPC_COMMAND_BATCHER_H_
