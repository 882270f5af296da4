// GrpcSidecarClient: the sidecars over gRPC, routed by the command's target service.
//
// Routes map a service name ("eonce.ledger.v1.Ledger") to a sidecar address; a default
// route serves the rest. Each route's retention comes from the sidecar's GetInfo, asked
// in the background until it answers, and is refreshed every minute. Thread-safe.
//
// The client keeps count of its calls in flight. Destroying it cancels them and waits
// until each one's callback has run, so no callback outlives the client or what its
// callers handed it (an agent shutting down cancels its last attempts this way; their
// records are reconciled after the restart).
#ifndef EONCE_OUTBOX_AGENT_GRPC_SIDECAR_CLIENT_H_
#define EONCE_OUTBOX_AGENT_GRPC_SIDECAR_CLIENT_H_

#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "common/tls.h"
#include "eonce/v1/sidecar.grpc.pb.h"
#include "outbox_agent/sidecar_client.h"

namespace eonce {

class GrpcSidecarClient : public SidecarClient {
 public:
  // `routes`: "service=address,service=address"; `default_address` may be empty.
  static absl::StatusOr<std::unique_ptr<GrpcSidecarClient>> Create(
      const std::string& routes, const std::string& default_address, const TlsFiles& tls,
      Clock& clock);
  ~GrpcSidecarClient() override;

  void Submit(const v1::Command& command, const Session& session, int64_t deadline_ms,
              std::function<void(absl::StatusOr<v1::SubmitResponse>)> done) override;
  void Reconcile(const v1::Command& command, const Session& session, int64_t deadline_ms,
                 std::function<void(absl::StatusOr<v1::ReconcileResponse>)> done) override;
  std::optional<int64_t> RetentionMs(const std::string& target_method) override;

  // Asks every route's GetInfo now and waits up to `timeout_ms`; the retention of each
  // route that answered. Used at startup to refuse a max age past the retention.
  std::map<std::string, int64_t> FetchRetentions(int64_t timeout_ms);

 private:
  struct Route {
    std::string address;
    std::unique_ptr<v1::Sidecar::Stub> stub;
    absl::Mutex mu;
    std::optional<int64_t> retention_ms ABSL_GUARDED_BY(mu);
    int64_t asked_at_ms ABSL_GUARDED_BY(mu) = 0;
    bool asking ABSL_GUARDED_BY(mu) = false;
  };

  explicit GrpcSidecarClient(Clock& clock) : clock_(clock) {}
  Route* RouteFor(const std::string& target_method);
  void AskInfo(Route* route);

  // Registers a call's context before it starts; false once the client is closing (the
  // caller then answers CANCELLED without starting the call). `Finished` goes last in
  // the call's callback.
  bool Started(uint64_t* id, std::shared_ptr<grpc::ClientContext> context);
  void Finished(uint64_t id);
  // One call to the sidecar that serves `command`: routed, tracked (Started/Finished),
  // with the session and the deadline; `issue(stub, context, request, response, on_done)`
  // starts the stub's async method.
  template <typename Request, typename Response, typename Issue>
  void Call(const v1::Command& command, const Session& session, int64_t deadline_ms,
            Request request, Issue issue,
            std::function<void(absl::StatusOr<Response>)> done);

  Clock& clock_;
  absl::Mutex calls_mu_;
  bool closing_ ABSL_GUARDED_BY(calls_mu_) = false;
  uint64_t next_call_ ABSL_GUARDED_BY(calls_mu_) = 0;
  std::map<uint64_t, std::weak_ptr<grpc::ClientContext>> calls_ ABSL_GUARDED_BY(calls_mu_);
  std::map<std::string, std::unique_ptr<Route>> routes_;
  std::unique_ptr<Route> default_route_;
};

}  // namespace eonce

#endif  // EONCE_OUTBOX_AGENT_GRPC_SIDECAR_CLIENT_H_
