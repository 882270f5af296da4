// SidecarClient: how the agent reaches the sidecars it replays to.
//
// The real one (grpc_sidecar_client.h) routes each command by its target service to a
// sidecar address, and for a sharded service by its slot to the shard that owns it; the simulation routes through its simulated network. Callbacks run
// exactly once, possibly on another thread.
#ifndef EONCE_OUTBOX_AGENT_CORE_SIDECAR_CLIENT_H_
#define EONCE_OUTBOX_AGENT_CORE_SIDECAR_CLIENT_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "eonce/v1/command.pb.h"
#include "eonce/v1/sidecar.pb.h"

namespace eonce {

// The credential replay runs under, as sent to the sidecar.
struct Session {
  std::string tenant;
  std::string actor;
  int64_t epoch = 0;
};

// The Reconcile request for `command`: looked up by its key, and bound to its command id
// and payload so that another command's record under the same key is never its answer.
inline v1::ReconcileRequest ReconcileRequestFor(const v1::Command& command) {
  v1::ReconcileRequest request;
  request.set_idempotency_key(command.idempotency_key());
  request.set_expect_command_id(command.command_id());
  request.set_expect_payload_sha256(command.payload_hash().sha256());
  // A sharded sidecar refuses a lookup for a slot it does not own rather than answer
  // NOT_SEEN for a record another shard holds.
  *request.mutable_entity() = command.entity();
  return request;
}

class SidecarClient {
 public:
  using SubmitDone = std::function<void(absl::StatusOr<v1::SubmitResponse>)>;
  // One Submit of a SubmitMany; `command` need only live until SubmitMany returns.
  struct SubmitCall {
    const v1::Command* command;
    int64_t deadline_ms;
    SubmitDone done;
  };

  virtual ~SidecarClient() = default;
  virtual void Submit(const v1::Command& command, const Session& session, int64_t deadline_ms,
                      SubmitDone done) = 0;
  // Submits handed over together, under one session (the replayer's round of attempts):
  // a client that batches sends them to each sidecar as few calls as its limits allow,
  // rather than the first alone. Each `done` runs exactly once, as Submit's does. By
  // default, one Submit each.
  virtual void SubmitMany(const Session& session, std::vector<SubmitCall> calls) {
    for (SubmitCall& call : calls) {
      Submit(*call.command, session, call.deadline_ms, std::move(call.done));
    }
  }
  virtual void Reconcile(const v1::Command& command, const Session& session, int64_t deadline_ms,
                         std::function<void(absl::StatusOr<v1::ReconcileResponse>)> done) = 0;
  // The retention window of the sidecar that serves `target_method`; nullopt until it is
  // known (the client then asks for it in the background).
  virtual std::optional<int64_t> RetentionMs(const std::string& target_method) = 0;
};

}  // namespace eonce

#endif  // EONCE_OUTBOX_AGENT_CORE_SIDECAR_CLIENT_H_
