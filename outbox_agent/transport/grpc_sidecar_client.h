// GrpcSidecarClient: the sidecars over gRPC, routed by the command's target service.
//
// Routes map a service name ("eonce.ledger.v1.Ledger") to a sidecar address; a default
// route serves the rest. Each route's retention comes from the sidecar's GetInfo, asked
// in the background until it answers, and is refreshed every minute. Thread-safe.
//
// A sharded service's route is "sharded:<address>": the address is any of its sidecars
// (a seed), whose slot map (Sidecar.GetSlotMap) says which shard owns each slot; every
// command goes to the owner of its slot (common/coord/slots.h). The map is cached, asked again
// every 30 s, and at once when a sidecar refuses a command (SLOT_MOVED, SLOT_MIGRATING)
// under a newer epoch than the one held, from the owner the refusal names (and from the
// seed, at most every second, when a shard cannot be reached at all). The refusal
// itself goes back to the replayer, which retries the command (still first in its
// entity's lane, so the entity's order holds across the change) to the new owner.
//
// The slot maps are kept in grpc_sidecar_client_slots.cc.
//
// Submits to one sidecar under one session go as SubmitBatch calls (common/rpc/submit_batcher.h:
// a command alone goes at once; those that arrive while two calls are in flight share the
// next; those handed over together by SubmitMany go together), unless batching is turned
// off. A sidecar that answers SubmitBatch with
// UNIMPLEMENTED (one from before it) gets one Submit per command from then on, starting
// with that batch's commands: nothing is lost or sent twice by the switch, because the
// batch was refused before any of its commands was looked at.
//
// The client keeps count of its calls in flight (common/rpc/call_tracker.h). Destroying it
// cancels them and waits until each one's callback has run and its state is gone, so no
// callback outlives the client or what its callers handed it, and no channel outlives it
// on one of gRPC's threads (an agent shutting down cancels its last attempts this way;
// their records are reconciled after the restart).
#ifndef EONCE_OUTBOX_AGENT_TRANSPORT_GRPC_SIDECAR_CLIENT_H_
#define EONCE_OUTBOX_AGENT_TRANSPORT_GRPC_SIDECAR_CLIENT_H_

#include <atomic>
#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/rpc/call_tracker.h"
#include "common/base/clock.h"
#include "common/coord/slots.h"
#include "common/rpc/submit_batcher.h"
#include "common/rpc/tls.h"
#include "eonce/v1/sidecar.grpc.pb.h"
#include "outbox_agent/core/sidecar_client.h"
#include "outbox_agent/transport/submit_batcher_registry.h"

namespace eonce {

class GrpcSidecarClient : public SidecarClient {
 public:
  // `routes`: "service=address,service=sharded:address"; `default_address` may be empty
  // or "sharded:address" too.
  static absl::StatusOr<std::unique_ptr<GrpcSidecarClient>> Create(
      const std::string& routes, const std::string& default_address, const TlsFiles& tls,
      Clock& clock);
  ~GrpcSidecarClient() override;

  // Whether Submits go as SubmitBatch calls (on unless turned off before the first one).
  void set_batch_submits(bool on) { batch_submits_ = on; }

  void Submit(const v1::Command& command, const Session& session, int64_t deadline_ms,
              std::function<void(absl::StatusOr<v1::SubmitResponse>)> done) override;
  // Those that go to one sidecar enter its batcher together (CommandBatcher::AddMany).
  void SubmitMany(const Session& session, std::vector<SubmitCall> calls) override;
  void Reconcile(const v1::Command& command, const Session& session, int64_t deadline_ms,
                 std::function<void(absl::StatusOr<v1::ReconcileResponse>)> done) override;
  std::optional<int64_t> RetentionMs(const std::string& target_method) override;

  // Asks every route's GetInfo now and waits up to `timeout_ms`; the retention of each
  // route that answered. Used at startup to refuse a max age past the retention.
  std::map<std::string, int64_t> FetchRetentions(int64_t timeout_ms);

  // The epoch of the slot map held for `target_method`'s sharded route; 0 when none is
  // held or the route is not sharded.
  uint64_t SlotMapEpoch(const std::string& target_method);

 private:
  struct Route {
    std::string address;  // of the sidecar; of a seed for a sharded route
    std::shared_ptr<v1::Sidecar::Stub> stub;
    bool sharded = false;
    absl::Mutex mu;
    std::optional<int64_t> retention_ms ABSL_GUARDED_BY(mu);
    int64_t asked_at_ms ABSL_GUARDED_BY(mu) = 0;
    bool asking ABSL_GUARDED_BY(mu) = false;
    // Sharded: the slot map held, the shards' stubs by address, the map's refresh.
    std::shared_ptr<const SlotMap> map ABSL_GUARDED_BY(mu);
    std::map<std::string, std::shared_ptr<v1::Sidecar::Stub>> shard_stubs ABSL_GUARDED_BY(mu);
    int64_t map_asked_at_ms ABSL_GUARDED_BY(mu) = 0;
    bool asking_map ABSL_GUARDED_BY(mu) = false;
    // False once a sidecar of this route answered SubmitBatch with UNIMPLEMENTED.
    std::atomic<bool> batches{true};
    // Set once a batch past the sidecar's message limit was sent again one by one.
    std::atomic<bool> split_logged{false};
  };
  GrpcSidecarClient(Clock& clock, TlsFiles tls) : clock_(clock), tls_(std::move(tls)) {}
  absl::StatusOr<std::unique_ptr<Route>> NewRoute(const std::string& target);
  // One Submit call for one command.
  void SubmitOne(const v1::Command& command, const Session& session, int64_t deadline_ms,
                 std::function<void(absl::StatusOr<v1::SubmitResponse>)> done);
  std::shared_ptr<SubmitBatcher> BatcherFor(Route* route, std::shared_ptr<v1::Sidecar::Stub> stub,
                            const Session& session);
  // One SubmitBatch call; on UNIMPLEMENTED, or when the batch or its answer was past the
  // sidecar's message limit, the commands again one Submit each.
  void SendBatch(Route* route, std::shared_ptr<v1::Sidecar::Stub> stub, const Session& session,
                 std::vector<v1::Command> commands, int64_t deadline_ms,
                 SubmitBatcher::BatchDone done);
  void SubmitEach(std::vector<v1::Command> commands, const Session& session, int64_t deadline_ms,
                  SubmitBatcher::BatchDone done);
  Route* RouteFor(const std::string& target_method);
  void AskInfo(Route* route);
  // The stub of the sidecar that takes `command` on `route`: the route's own, or for a
  // sharded route its slot's owner (UNAVAILABLE SLOT_MAP_UNKNOWN until a map is held).
  absl::StatusOr<std::shared_ptr<v1::Sidecar::Stub>> StubFor(Route& route,
                                                             const v1::Command& command);
  // Asks `address` (a shard named by a refusal, or the seed when empty) for its slot map
  // in the background, and holds it if it is newer.
  void AskSlotMap(Route* route, const std::string& address);
  // After a failed call: asks for the map again if the refusing sidecar holds a newer one,
  // or if no sidecar answered.
  void OnSlotRefusal(Route* route, const absl::Status& status);

  // One call to the sidecar that serves `command`: routed, tracked (calls_),
  // with the session and the deadline; `issue(stub, context, request, response, on_done)`
  // starts the stub's async method.
  template <typename Request, typename Response, typename Issue>
  void Call(const v1::Command& command, const Session& session, int64_t deadline_ms,
            Request request, Issue issue,
            std::function<void(absl::StatusOr<Response>)> done);

  Clock& clock_;
  const TlsFiles tls_;
  CallTracker calls_;  // each call's state holds a ticket, before its ClientContext
  std::map<std::string, std::unique_ptr<Route>> routes_;
  std::unique_ptr<Route> default_route_;
  bool batch_submits_ = true;
  // Every sidecar's message limit, both ways; how long GetInfo and GetSlotMap may take.
  static constexpr int kMaxMessageBytes = 8 << 20;
  static constexpr int64_t kInfoTimeoutMs = 2'000;
  // Batchers kept (more while callers hold them).
  static constexpr size_t kMaxBatchers = 64;
  // A batcher per sidecar and session. Destroyed before the call registry above: by then
  // every call has ended.
  SubmitBatcherRegistry batchers_{kMaxBatchers};
};

}  // namespace eonce

#endif  // EONCE_OUTBOX_AGENT_TRANSPORT_GRPC_SIDECAR_CLIENT_H_
