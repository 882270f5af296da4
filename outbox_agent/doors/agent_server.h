// AgentServer: the outbox agent process minus main(): the store, the credential, the
// sidecar client, the replayer and its loop, and the Agent gRPC service.
#ifndef EONCE_OUTBOX_AGENT_DOORS_AGENT_SERVER_H_
#define EONCE_OUTBOX_AGENT_DOORS_AGENT_SERVER_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/base/clock.h"
#include "common/command/command.h"
#include "common/base/metrics.h"
#include "common/base/random.h"
#include "common/store/rocks.h"
#include "common/rpc/server.h"
#include "common/rpc/tls.h"
#include "eonce/v1/agent.grpc.pb.h"
#include "grpcpp/server.h"
#include "outbox_agent/core/credential.h"
#include "outbox_agent/core/outbox.h"
#include "outbox_agent/store/outbox_store.h"
#include "outbox_agent/doors/relay.h"
#include "outbox_agent/core/replayer.h"
#include "outbox_agent/core/sidecar_client.h"
#include "outbox_agent/core/state_feed.h"

namespace eonce {

struct AgentServerOptions {
  std::string listen_address = "127.0.0.1:0";
  std::string data_dir;
  std::string tenant;
  // The actor the agent states for commands that name none; empty: none, so the workload
  // its certificate names acts as itself.
  std::string actor;
  int64_t initial_epoch = 1;
  std::string credential_file;
  // service=address pairs, and the sidecar for everything else.
  std::string routes;
  std::string default_sidecar;
  // Concurrent Submits to one sidecar go as SubmitBatch calls.
  bool batch_submits = true;
  CommandLimits limits;
  OutboxStoreOptions store;
  ReplayerOptions replay;
  // How long to wait at startup for the sidecars' retention (to refuse a bad max age).
  int64_t startup_info_wait_ms = 3'000;
  // When nothing wakes the replay loop (an Enqueue, an attempt's end, a new credential),
  // it sleeps until the outbox's next due time (a retry, a claim that runs out) or its
  // periodic work (each second), at most `max_idle_wait_ms` (outbox_agent/idle_wait.h).
  // Records due already that a pass could not start are looked at every `idle_pump_ms`.
  int64_t idle_pump_ms = 20;
  int64_t max_idle_wait_ms = 1'000;
  // How often the loop probes the store (readiness) and rereads the credential file.
  int64_t probe_every_ms = 1'000;
  // Prometheus endpoint, "host:port"; empty: none.
  std::string metrics_address;
  // Mutual TLS on the listening port (producers' certificates must name `tenant`) and
  // towards the sidecars; empty: plaintext, which a listen_address other hosts can reach
  // is refused without `insecure` (common/rpc/server_security.h).
  TlsFiles tls;
  // --insecure: plaintext on any address, identities from headers; eonce_insecure is 1.
  bool insecure = false;
  // A plaintext grpc.health.v1-only port for probes without a client certificate;
  // empty: none.
  std::string health_address;
  // Free space kept on the outbox's disk; below it Enqueue is refused (STORE_FULL).
  uint64_t min_free_bytes = 256ull << 20;
  // The address of a business whose transactional outbox (eonce.v1.FollowUps) this agent
  // relays for its tenant; empty: none. Polled every `relay_every_ms` while idle. A unix
  // socket (the pod's own business) is dialled without TLS.
  std::string relay_from;
  int64_t relay_every_ms = 50;
};

class AgentServer {
 public:
  static absl::StatusOr<std::unique_ptr<AgentServer>> Start(AgentServerOptions options,
                                                           Clock& clock, Random& random);
  ~AgentServer();

  int port() const { return port_; }
  int metrics_port() const { return metrics_ != nullptr ? metrics_->port() : 0; }
  Outbox& outbox() { return *outbox_; }
  OutboxStore& store() { return *store_; }
  Replayer& replayer() { return *replayer_; }
  CredentialState& credential() { return *credential_; }

  // Stops accepting, lets in-flight attempts finish for up to `drain_ms`, closes the store.
  absl::Status Shutdown(int64_t drain_ms);
  // Wakes the replay loop (new work arrived), unless it could start no attempt now: while
  // the credential is not active or every attempt slot is taken, a wake-up would find
  // nothing to do, and what ends that state kicks again (a new credential, an attempt's
  // end); the loop's idle wake-up (idle_wait.h) catches the rest. Under load this spares
  // the loop a wake-up, and the kicker a futex call, per Enqueue.
  void Kick();
  // Kicks that woke the loop, and kicks left out because it could start nothing.
  int64_t kicks_sent() const { return kicks_sent_.load(std::memory_order_relaxed); }
  int64_t kicks_skipped() const { return kicks_skipped_.load(std::memory_order_relaxed); }

 private:
  AgentServer() = default;
  void Loop();
  bool stopping() ABSL_LOCKS_EXCLUDED(loop_mu_);
  void RelayLoop();
  std::vector<prometheus::MetricFamily> Collect();

  AgentServerOptions options_;
  Clock* clock_ = nullptr;
  std::unique_ptr<OutboxStore::Filters> filters_;
  std::unique_ptr<RocksStore> rocks_;
  std::unique_ptr<OutboxStore> store_;
  std::unique_ptr<CredentialState> credential_;
  std::unique_ptr<SidecarClient> client_;
  StateFeed feed_;
  std::unique_ptr<Outbox> outbox_;
  std::unique_ptr<Replayer> replayer_;
  std::unique_ptr<FollowUpSource> relay_source_;
  std::unique_ptr<FollowUpRelay> relay_;
  std::thread relay_loop_;
  std::unique_ptr<MetricsEndpoint> metrics_;
  std::unique_ptr<HealthPort> health_port_;
  std::unique_ptr<v1::Agent::CallbackService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::atomic<bool> draining_{false};
  std::atomic<bool> ready_{false};
  std::atomic<int64_t> kicks_sent_{0};
  std::atomic<int64_t> kicks_skipped_{0};
  absl::Mutex loop_mu_;
  bool kicked_ ABSL_GUARDED_BY(loop_mu_) = false;
  bool stop_ ABSL_GUARDED_BY(loop_mu_) = false;
  std::thread loop_;
  int port_ = 0;
};

}  // namespace eonce

#endif  // EONCE_OUTBOX_AGENT_DOORS_AGENT_SERVER_H_
