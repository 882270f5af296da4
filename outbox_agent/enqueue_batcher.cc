#include "outbox_agent/enqueue_batcher.h"

#include <memory>
#include <vector>

#include "common/grpc_status.h"
#include "grpcpp/client_context.h"

namespace eonce {

EnqueueBatcher::Options EnqueueBatcher::DefaultOptions() {
  Options options;
  options.max_batch_bytes = kMaxBatchBytes;
  return options;
}

EnqueueBatcher::SendBatch EnqueueBatcher::Over(v1::Agent::Stub& stub, Clock& clock) {
  return [&stub, &clock](std::vector<v1::Command> commands, int64_t deadline_ms,
                         BatchDone done) {
    struct Call {
      grpc::ClientContext context;
      v1::EnqueueBatchRequest request;
      v1::EnqueueBatchResponse response;
    };
    auto call = std::make_shared<Call>();
    if (deadline_ms > 0) call->context.set_deadline(WallDeadline(clock, deadline_ms));
    for (v1::Command& command : commands) *call->request.add_commands() = std::move(command);
    stub.async()->EnqueueBatch(&call->context, &call->request, &call->response,
                               [call, done = std::move(done)](grpc::Status status) {
                                 if (!status.ok()) {
                                   done(FromGrpcStatus(status, &call->context));
                                   return;
                                 }
                                 done(AnswersOf(call->response));
                               });
  };
}

}  // namespace eonce
