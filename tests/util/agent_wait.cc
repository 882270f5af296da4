#include "tests/util/agent_wait.h"

#include <chrono>
#include <memory>

#include "absl/strings/str_cat.h"
#include "outbox_agent/store/states.h"

namespace eonce::testing {

absl::StatusOr<v1::OutboxRecord> WaitUntilFinal(v1::Agent::Stub& agent,
                                                const std::string& command_id,
                                                int64_t timeout_ms) {
  const auto deadline = std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms);
  grpc::ClientContext watch_context;
  watch_context.set_deadline(deadline);
  std::unique_ptr<grpc::ClientReader<v1::WatchEvent>> watch =
      agent.Watch(&watch_context, WatchFinalStates());
  v1::OutboxRecord record;
  auto read = [&]() -> bool {
    grpc::ClientContext context;
    context.set_deadline(deadline);
    v1::GetRequest request;
    request.set_command_id(command_id);
    return agent.Get(&context, request, &record).ok() && IsFinal(record.state());
  };
  // The agent sends the headers once the subscription is in place: a change after the
  // first read is an event on the stream.
  watch->WaitForInitialMetadata();
  if (read()) {
    watch_context.TryCancel();
    return record;
  }
  v1::WatchEvent event;
  while (watch->Read(&event)) {
    if (event.command_id() == command_id && read()) {
      watch_context.TryCancel();
      return record;
    }
  }
  // The stream ended (deadline, or the agent cut a slow watcher off): one last look.
  if (read()) return record;
  return absl::DeadlineExceededError(
      absl::StrCat("command ", command_id, " is not final after ", timeout_ms, " ms; state ",
                   v1::OutboxState_Name(record.state())));
}

}  // namespace eonce::testing
