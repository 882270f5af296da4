// AgentClient: the embeddable C++ client a producing service links to enqueue commands.
//
//   auto agent = AgentClient::Connect("unix:/run/eonce/agent.sock");
//   ledger::v1::TransferRequest transfer = ...;
//   auto record = agent->Enqueue("/eonce.ledger.v1.Ledger/Transfer", transfer,
//                                {"account", "alice"});
//
// Enqueue returns once the command is durable in the agent's outbox. Keep the command id
// of the returned record: enqueueing the same id again is harmless. Thread-safe.
#ifndef EONCE_OUTBOX_AGENT_CLIENT_H_
#define EONCE_OUTBOX_AGENT_CLIENT_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/tls.h"
#include "eonce/v1/agent.grpc.pb.h"
#include "google/protobuf/message.h"

namespace eonce {

struct EnqueueOptions {
  std::string command_id;       // empty: the agent creates one
  std::string idempotency_key;  // empty: derived
  std::string actor;            // empty: the agent's
  int64_t timeout_ms = 5'000;
};

class AgentClient {
 public:
  // `address`: host:port or unix:/path. With `tls` enabled, mutual TLS: the certificate
  // must name the agent's tenant.
  static std::unique_ptr<AgentClient> Connect(const std::string& address,
                                              const TlsFiles& tls = TlsFiles());

  absl::StatusOr<v1::OutboxRecord> Enqueue(const std::string& target_method,
                                           const google::protobuf::Message& request,
                                           const v1::Entity& entity,
                                           const EnqueueOptions& options = {});
  absl::StatusOr<v1::EnqueueResponse> Enqueue(const v1::Command& command, int64_t timeout_ms);
  absl::StatusOr<v1::OutboxRecord> Get(const std::string& command_id);
  v1::Agent::Stub& stub() { return *stub_; }

 private:
  explicit AgentClient(std::unique_ptr<v1::Agent::Stub> stub) : stub_(std::move(stub)) {}
  std::unique_ptr<v1::Agent::Stub> stub_;
};

}  // namespace eonce

#endif  // EONCE_OUTBOX_AGENT_CLIENT_H_
