// AgentClient: the embeddable C++ client a producing service links to enqueue commands.
//
//   auto agent = AgentClient::Connect("unix:/run/eonce/agent.sock");
//   ledger::v1::TransferRequest transfer = ...;
//   v1::Entity alice;
//   alice.set_type("account");
//   alice.set_id("alice");
//   auto record = agent->Enqueue("/eonce.ledger.v1.Ledger/Transfer", transfer, alice);
//
// Enqueue returns once the command is durable in the agent's outbox. Threads that call it at
// the same time share EnqueueBatch calls (an EnqueueBatcher: a lone call goes at once, and
// those that arrive while calls are in flight go together in the next one), so a producer
// with many request threads pays one call's fixed cost for many commands (past 4,096
// commands waiting for a call, Enqueue fails at once with RESOURCE_EXHAUSTED, nothing
// sent). The client creates the command id before the first attempt (unless the caller
// gives one) and retries with that same id when an answer is lost (UNAVAILABLE,
// DEADLINE_EXCEEDED): the agent answers a retry of a stored command with that record
// (created = false), so a lost answer never becomes a second command. Retries are bounded
// (max_attempts) and spaced by full-jitter backoff. Any other error is returned at once.
//
// EnqueueMany sends many commands as EnqueueBatch calls (up to 64 each), with the same
// ids-first retries, one answer per command.
//
// EnqueueOnce makes exactly one attempt and is the only call that may send a command
// without an id (the agent then creates one). Such a call is NOT safe to retry: if its
// answer is lost, the caller cannot tell whether the command is stored, and sending it
// again may store it twice.
//
// Thread-safe. The clock and random source must outlive the client.
#ifndef EONCE_OUTBOX_AGENT_CLIENT_CLIENT_H_
#define EONCE_OUTBOX_AGENT_CLIENT_CLIENT_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/base/clock.h"
#include "common/base/random.h"
#include "common/rpc/tls.h"
#include "eonce/v1/agent.grpc.pb.h"
#include "google/protobuf/message.h"
#include "outbox_agent/client/enqueue_batcher.h"

namespace eonce {

struct EnqueueOptions {
  std::string command_id;       // empty: the client creates one before the first attempt
  std::string idempotency_key;  // empty: derived by the agent
  std::string actor;            // empty: the agent's
  int64_t timeout_ms = 5'000;   // of each attempt
  // Attempts in all, the first included. Each retry carries the same command id.
  int max_attempts = 6;
  int64_t base_backoff_ms = 50;
  int64_t max_backoff_ms = 2'000;
};

// Gives `command` a fresh 32-hex-digit id if it has none. Called once per intent, before
// its first attempt.
void AssignCommandId(v1::Command* command, Random& random);

// Whether a failed Enqueue may have stored the command (the answer was lost) and is
// retried with the same id: UNAVAILABLE and DEADLINE_EXCEEDED.
bool RetriesEnqueue(const absl::Status& status);

// One attempt at sending a command (with its id) to the agent.
using EnqueueAttempt = std::function<absl::StatusOr<v1::EnqueueResponse>(const v1::Command&)>;

// The retry loop of Enqueue, apart from the transport: assigns the id, then calls
// `attempt` until it succeeds, fails with an error RetriesEnqueue refuses, or runs out of
// attempts; waits on `clock` between attempts.
absl::StatusOr<v1::EnqueueResponse> EnqueueWithRetries(v1::Command command,
                                                       const EnqueueOptions& options,
                                                       Random& random, Clock& clock,
                                                       const EnqueueAttempt& attempt);

// One EnqueueBatch attempt for up to kMaxBatchCommands commands (with their ids): the
// call's failure, or one answer per command in order.
using EnqueueAnswers = std::vector<absl::StatusOr<v1::EnqueueResponse>>;
using EnqueueBatchAttempt =
    std::function<absl::StatusOr<EnqueueAnswers>(const std::vector<v1::Command>&)>;

// The retry loop of EnqueueMany, apart from the transport: assigns every id first, then
// sends the commands not yet answered in batches (at most kMaxBatchCommands and
// `max_batch_bytes` of commands each) until each has succeeded, failed with an error
// RetriesEnqueue refuses, or run out of attempts; a failed call counts as that error for
// each of its commands. Waits on `clock` between attempts. Answers in `commands`' order.
EnqueueAnswers EnqueueManyWithRetries(std::vector<v1::Command> commands,
                                      const EnqueueOptions& options, size_t max_batch_bytes,
                                      Random& random, Clock& clock,
                                      const EnqueueBatchAttempt& attempt);

class AgentClient {
 public:
  // `address`: host:port or unix:/path. With `tls` enabled, mutual TLS: the certificate
  // must name the agent's tenant.
  static std::unique_ptr<AgentClient> Connect(const std::string& address,
                                              const TlsFiles& tls = TlsFiles(),
                                              Clock& clock = RealClock::Get(),
                                              Random& random = RealRandom::Get());

  absl::StatusOr<v1::OutboxRecord> Enqueue(const std::string& target_method,
                                           const google::protobuf::Message& request,
                                           const v1::Entity& entity,
                                           const EnqueueOptions& options = {});
  // `command` as a producer fills it (method, request, entity; the id is optional).
  absl::StatusOr<v1::EnqueueResponse> Enqueue(const v1::Command& command,
                                              const EnqueueOptions& options = {});
  // Exactly one attempt, nothing added: see the note above on commands without an id.
  absl::StatusOr<v1::EnqueueResponse> EnqueueOnce(const v1::Command& command,
                                                  int64_t timeout_ms);
  // Many commands (as producers fill them; the ids are optional) in EnqueueBatch calls,
  // retried as Enqueue retries one command; each gets its own answer, in order. The
  // options' command_id, idempotency_key and actor are not used: each command carries
  // its own. An agent without EnqueueBatch (an older release) gets one Enqueue each.
  EnqueueAnswers EnqueueMany(std::vector<v1::Command> commands,
                             const EnqueueOptions& options = {});
  absl::StatusOr<v1::OutboxRecord> Get(const std::string& command_id);
  v1::Agent::Stub& stub() { return *stub_; }
  // The EnqueueBatch calls Enqueue has started: fewer than its commands when callers
  // overlapped.
  uint64_t shared_calls_started() const { return shared_.calls_started(); }

 private:
  AgentClient(std::unique_ptr<v1::Agent::Stub> stub, Clock& clock, Random& random)
      : stub_(std::move(stub)),
        clock_(clock),
        random_(random),
        shared_(EnqueueBatcher::DefaultOptions(), *stub_, clock_) {}
  // One attempt of Enqueue: in the next shared EnqueueBatch call, or on its own when the
  // agent serves no EnqueueBatch.
  absl::StatusOr<v1::EnqueueResponse> EnqueueShared(const v1::Command& command,
                                                    int64_t timeout_ms);

  std::unique_ptr<v1::Agent::Stub> stub_;
  Clock& clock_;
  Random& random_;
  std::atomic<bool> no_batches_{false};  // the agent answered EnqueueBatch UNIMPLEMENTED
  EnqueueBatcher shared_;  // after the stub: its end cancels its calls before the stub goes
};

}  // namespace eonce

#endif  // EONCE_OUTBOX_AGENT_CLIENT_CLIENT_H_
