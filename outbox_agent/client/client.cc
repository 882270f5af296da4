#include "outbox_agent/client/client.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <utility>

#include "absl/synchronization/notification.h"
#include "common/base/clock.h"
#include "common/command/command.h"
#include "common/rpc/grpc_status.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "outbox_agent/client/enqueue_batcher.h"
#include "outbox_agent/core/retry_policy.h"

namespace eonce {

void AssignCommandId(v1::Command* command, Random& random) {
  if (command->command_id().empty()) command->set_command_id(random.HexId());
}

bool RetriesEnqueue(const absl::Status& status) {
  return status.code() == absl::StatusCode::kUnavailable ||
         status.code() == absl::StatusCode::kDeadlineExceeded;
}

absl::StatusOr<v1::EnqueueResponse> EnqueueWithRetries(v1::Command command,
                                                       const EnqueueOptions& options,
                                                       Random& random, Clock& clock,
                                                       const EnqueueAttempt& attempt) {
  // One command is a batch of one: the same ids first, the same retries.
  EnqueueAnswers answers = EnqueueManyWithRetries(
      {std::move(command)}, options, std::numeric_limits<size_t>::max(), random, clock,
      [&](const std::vector<v1::Command>& batch) -> absl::StatusOr<EnqueueAnswers> {
        return EnqueueAnswers{attempt(batch.front())};
      });
  return std::move(answers.front());
}

EnqueueAnswers EnqueueManyWithRetries(std::vector<v1::Command> commands,
                                      const EnqueueOptions& options, size_t max_batch_bytes,
                                      Random& random, Clock& clock,
                                      const EnqueueBatchAttempt& attempt) {
  for (v1::Command& command : commands) AssignCommandId(&command, random);
  EnqueueAnswers answers(commands.size(), absl::InternalError("no attempt made"));
  std::vector<size_t> pending(commands.size());
  for (size_t i = 0; i < pending.size(); ++i) pending[i] = i;
  RetryOptions spacing;
  spacing.base_backoff_ms = options.base_backoff_ms;
  spacing.max_backoff_ms = options.max_backoff_ms;
  Backoff backoff(spacing, random);
  const int attempts = std::max(1, options.max_attempts);
  for (int n = 1; n <= attempts && !pending.empty(); ++n) {
    if (n > 1) clock.SleepMs(backoff.DelayMs(n - 1));
    std::vector<size_t> again;
    for (size_t first = 0; first < pending.size();) {
      // The next batch: at least one command, then as many as the limits let in.
      size_t end = first;
      size_t bytes = 0;
      std::vector<v1::Command> batch;
      while (end < pending.size() && static_cast<int>(batch.size()) < kMaxBatchCommands) {
        const v1::Command& next = commands[pending[end]];
        if (!batch.empty() && bytes + next.ByteSizeLong() > max_batch_bytes) break;
        bytes += next.ByteSizeLong();
        batch.push_back(next);
        ++end;
      }
      absl::StatusOr<EnqueueAnswers> answered = attempt(batch);
      if (answered.ok() && answered->size() != batch.size()) {
        answered = absl::InternalError("the agent answered a batch with another count");
      }
      for (size_t k = first; k < end; ++k) {
        absl::StatusOr<v1::EnqueueResponse> answer =
            answered.ok() ? std::move((*answered)[k - first])
                          : absl::StatusOr<v1::EnqueueResponse>(answered.status());
        if (!answer.ok() && RetriesEnqueue(answer.status())) again.push_back(pending[k]);
        answers[pending[k]] = std::move(answer);
      }
      first = end;
    }
    pending = std::move(again);
  }
  return answers;
}

std::unique_ptr<AgentClient> AgentClient::Connect(const std::string& address, const TlsFiles& tls,
                                                  Clock& clock, Random& random) {
  return std::unique_ptr<AgentClient>(new AgentClient(
      v1::Agent::NewStub(grpc::CreateChannel(address, ChannelCredentials(tls))), clock, random));
}

absl::StatusOr<v1::EnqueueResponse> AgentClient::EnqueueOnce(const v1::Command& command,
                                                             int64_t timeout_ms) {
  grpc::ClientContext context;
  context.set_deadline(WallIn(timeout_ms));
  v1::EnqueueRequest request;
  *request.mutable_command() = command;
  v1::EnqueueResponse response;
  grpc::Status status = stub_->Enqueue(&context, request, &response);
  if (!status.ok()) return FromGrpcStatus(status, &context);
  return response;
}

absl::StatusOr<v1::EnqueueResponse> AgentClient::EnqueueShared(const v1::Command& command,
                                                               int64_t timeout_ms) {
  if (no_batches_.load(std::memory_order_relaxed)) return EnqueueOnce(command, timeout_ms);
  absl::StatusOr<v1::EnqueueResponse> answer = absl::InternalError("not answered");
  absl::Notification answered;
  // The batch call is due at its earliest command's deadline, so the answer comes.
  shared_.Enqueue(command, std::max<int64_t>(1, clock_.NowMs() + timeout_ms),
                  [&](EnqueueBatcher::Answer a) {
                    answer = std::move(a);
                    answered.Notify();
                  });
  answered.WaitForNotification();
  if (answer.status().code() == absl::StatusCode::kUnimplemented) {
    // An agent from before EnqueueBatch, which looked at none of the batch.
    no_batches_.store(true, std::memory_order_relaxed);
    return EnqueueOnce(command, timeout_ms);
  }
  return answer;
}

absl::StatusOr<v1::EnqueueResponse> AgentClient::Enqueue(const v1::Command& command,
                                                         const EnqueueOptions& options) {
  return EnqueueWithRetries(command, options, random_, clock_, [&](const v1::Command& c) {
    return EnqueueShared(c, options.timeout_ms);
  });
}

absl::StatusOr<v1::OutboxRecord> AgentClient::Enqueue(const std::string& target_method,
                                                      const google::protobuf::Message& request,
                                                      const v1::Entity& entity,
                                                      const EnqueueOptions& options) {
  v1::Command command;
  command.set_target_method(target_method);
  command.set_request(request.SerializeAsString());
  *command.mutable_entity() = entity;
  command.set_command_id(options.command_id);
  command.set_idempotency_key(options.idempotency_key);
  command.set_actor(options.actor);
  auto response = Enqueue(command, options);
  if (!response.ok()) return response.status();
  return response->record();
}

EnqueueAnswers AgentClient::EnqueueMany(std::vector<v1::Command> commands,
                                        const EnqueueOptions& options) {
  return EnqueueManyWithRetries(
      std::move(commands), options, EnqueueBatcher::kMaxBatchBytes, random_, clock_,
      [&](const std::vector<v1::Command>& batch) -> absl::StatusOr<EnqueueAnswers> {
        if (!no_batches_.load(std::memory_order_relaxed)) {
          grpc::ClientContext context;
          context.set_deadline(WallIn(options.timeout_ms));
          v1::EnqueueBatchRequest request;
          for (const v1::Command& command : batch) *request.add_commands() = command;
          v1::EnqueueBatchResponse response;
          grpc::Status status = stub_->EnqueueBatch(&context, request, &response);
          if (status.ok()) return EnqueueBatcher::AnswersOf(response);
          if (status.error_code() != grpc::StatusCode::UNIMPLEMENTED) {
            return FromGrpcStatus(status, &context);
          }
          // An agent from before EnqueueBatch, which looked at none of them.
          no_batches_.store(true, std::memory_order_relaxed);
        }
        EnqueueAnswers each;
        for (const v1::Command& command : batch) {
          each.push_back(EnqueueOnce(command, options.timeout_ms));
        }
        return each;
      });
}

absl::StatusOr<v1::OutboxRecord> AgentClient::Get(const std::string& command_id) {
  grpc::ClientContext context;
  context.set_deadline(WallIn(5'000));
  v1::GetRequest request;
  request.set_command_id(command_id);
  v1::OutboxRecord record;
  grpc::Status status = stub_->Get(&context, request, &record);
  if (!status.ok()) return FromGrpcStatus(status, &context);
  return record;
}

}  // namespace eonce
