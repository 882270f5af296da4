#include "outbox_agent/client/enqueue_batcher.h"

#include <memory>
#include <vector>

#include "common/rpc/grpc_status.h"
#include "common/base/status.h"
#include "grpcpp/client_context.h"

namespace eonce {

EnqueueBatcher::Options EnqueueBatcher::DefaultOptions() {
  Options options;
  options.max_batch_bytes = kMaxBatchBytes;
  return options;
}

EnqueueBatcher::EnqueueBatcher(Options options, v1::Agent::Stub& stub, Clock& clock)
    : CommandBatcher("the agent", options,
                     [this](std::vector<v1::Command> commands, int64_t deadline_ms,
                            BatchDone done) {
                       Send(std::move(commands), deadline_ms, std::move(done));
                     }),
      stub_(stub),
      clock_(clock) {}

void EnqueueBatcher::Send(std::vector<v1::Command> commands, int64_t deadline_ms,
                          BatchDone done) {
  struct Call {
    CallTracker::Ticket ticket;  // before the context: it goes after it
    grpc::ClientContext context;
    v1::EnqueueBatchRequest request;
    v1::EnqueueBatchResponse response;
  };
  auto call = std::make_shared<Call>();
  if (!calls_.Start(call)) {
    done(Error(absl::StatusCode::kUnavailable, "CLIENT_CLOSED",
               "the batcher is closing; nothing was sent"));
    return;
  }
  calls_started_.fetch_add(1, std::memory_order_relaxed);
  if (deadline_ms > 0) call->context.set_deadline(WallDeadline(clock_, deadline_ms));
  for (v1::Command& command : commands) *call->request.add_commands() = std::move(command);
  stub_.async()->EnqueueBatch(&call->context, &call->request, &call->response,
                              [call, done = std::move(done)](grpc::Status status) {
                                if (!status.ok()) {
                                  done(FromGrpcStatus(status, &call->context));
                                  return;
                                }
                                done(AnswersOf(call->response));
                              });
}

}  // namespace eonce
