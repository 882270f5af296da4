#include "outbox_agent/client.h"

#include <chrono>

#include "common/clock.h"
#include "common/grpc_status.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "outbox_agent/retry_policy.h"

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
  AssignCommandId(&command, random);
  RetryOptions spacing;
  spacing.base_backoff_ms = options.base_backoff_ms;
  spacing.max_backoff_ms = options.max_backoff_ms;
  Backoff backoff(spacing, random);
  int attempts = std::max(1, options.max_attempts);
  absl::StatusOr<v1::EnqueueResponse> answer = absl::InternalError("no attempt made");
  for (int n = 1; n <= attempts; ++n) {
    answer = attempt(command);
    if (answer.ok() || !RetriesEnqueue(answer.status()) || n == attempts) break;
    clock.SleepMs(backoff.DelayMs(n));
  }
  return answer;
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

absl::StatusOr<v1::EnqueueResponse> AgentClient::Enqueue(const v1::Command& command,
                                                         const EnqueueOptions& options) {
  return EnqueueWithRetries(command, options, random_, clock_, [&](const v1::Command& c) {
    return EnqueueOnce(c, options.timeout_ms);
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
