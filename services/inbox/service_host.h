// ServiceHost: what every business service built on the Inbox shares: the RocksDB store,
// the Inbox, the gRPC server with the Effects service and (unless legacy) the Outcome
// service, torn down in order. A service adds its own core and gRPC service in `setup`.
// Every port it serves admits eonce components and operators only (caller_gate.h).
#ifndef EONCE_SERVICES_INBOX_SERVICE_HOST_H_
#define EONCE_SERVICES_INBOX_SERVICE_HOST_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "common/base/clock.h"
#include "common/base/fault.h"
#include "common/base/metrics.h"
#include "common/store/rocks.h"
#include "common/rpc/server.h"
#include "common/rpc/tls.h"
#include "grpcpp/impl/codegen/service_type.h"
#include "grpcpp/server.h"
#include "services/inbox/forwards_service.h"
#include "services/inbox/inbox.h"
#include "services/inbox/inbox_services.h"
#include "services/inbox/inbox_upstream.h"

namespace eonce {

struct ServiceHostOptions {
  std::string listen_address = "127.0.0.1:0";
  std::string data_dir;
  bool legacy_mode = false;
  // How long inbox entries live (Inbox); at least the sidecar's forensic window.
  int64_t inbox_retention_ms = Inbox::kDefaultEntryRetentionMs;
  FaultInjector* faults = nullptr;
  // Prometheus endpoint, "host:port"; empty: none.
  std::string metrics_address;
  // How often the store is probed with a synced write (readiness).
  int64_t health_probe_ms = 1'000;
  // The name in the metrics: eonce_<name>_... ("ledger", "case").
  std::string metrics_name = "service";
  // Mutual TLS for the gRPC port; empty: plaintext, which a listen_address other hosts can
  // reach is refused without `insecure` (common/rpc/server_security.h).
  TlsFiles tls;
  // --insecure: plaintext on any address, identities from headers; eonce_insecure is 1.
  bool insecure = false;
  // A companion (an embedded sidecar) runs in this process and takes the tenants' calls:
  // listen_address is then the business's one other door, a unix socket or mutual TLS;
  // plaintext TCP is refused, loopback included (common/rpc/server_security.h).
  bool one_door = false;
  // A plaintext grpc.health.v1-only port for probes without a client certificate;
  // empty: none.
  std::string health_address;
  // Free space kept on the store's disk; below it mutations are refused (STORE_FULL).
  uint64_t min_free_bytes = 256ull << 20;
  // A unix socket ("unix:/path", in the pod's shared volume) on which the same services
  // are also served, in plaintext, to the pod's own sidecar, while listen_address keeps
  // serving on its port (which, trusting identity headers as the socket does, needs
  // mutual TLS: docs/operations.md); empty: none. The sidecar's forwards then cross no
  // loopback TCP (docs/performance.md).
  std::string sidecar_socket;
};

// What a service adds to its host.
struct HostedService {
  // Its own gRPC service; the host keeps it alive until shutdown.
  std::shared_ptr<grpc::Service> service;
  // Its mutating methods as in-process handlers, by full method name (InboxUpstream).
  // Given, the host also serves eonce.v1.Forwards with them, so that a sidecar sends the
  // forwards it has in flight together, one call for many (ForwardsServiceImpl). Empty:
  // one call per forward.
  std::map<std::string, InboxUpstream::Handler> handlers;
  // The service's own metrics, exported with the host's (the names taking the host's
  // prefix); empty: none.
  std::function<std::vector<prometheus::MetricFamily>(const std::string& prefix)> collect;
};

class ServiceHost {
 public:
  // Builds what the service adds from the opened store and inbox.
  using Setup = std::function<absl::StatusOr<HostedService>(RocksStore& store, Inbox& inbox)>;

  // `families` are the service's column families besides the inbox's.
  static absl::StatusOr<std::unique_ptr<ServiceHost>> Start(
      const ServiceHostOptions& options, Clock& clock, std::vector<ColumnFamilySpec> families,
      const Setup& setup);
  ~ServiceHost();

  int port() const { return port_; }
  int metrics_port() const { return metrics_ != nullptr ? metrics_->port() : 0; }
  RocksStore& store() { return *store_; }
  Inbox& inbox() { return *inbox_; }
  // Stops the server (in-flight calls finish within `drain_ms`) and closes the store.
  absl::Status Shutdown(int64_t drain_ms);

 private:
  ServiceHost() = default;
  std::vector<prometheus::MetricFamily> Collect() const;
  void ProbeLoop(int64_t every_ms);
  std::unique_ptr<RocksStore> store_;
  std::unique_ptr<Inbox> inbox_;
  // Mutations run here, off gRPC's threads, so concurrent ones share fsyncs.
  std::shared_ptr<grpc::Service> service_;
  std::function<std::vector<prometheus::MetricFamily>(const std::string& prefix)> collect_;
  std::unique_ptr<OutcomeServiceImpl> outcome_service_;
  std::unique_ptr<EffectsServiceImpl> effects_service_;
  std::unique_ptr<FollowUpsServiceImpl> follow_ups_service_;
  std::unique_ptr<SlotDataServiceImpl> slot_data_service_;
  std::unique_ptr<InboxUpstream> forward_handlers_;  // null: no handlers given
  std::unique_ptr<ForwardsServiceImpl> forwards_service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<MetricsEndpoint> metrics_;
  std::unique_ptr<HealthPort> health_port_;
  std::string metrics_name_;
  bool insecure_ = false;
  std::atomic<bool> ready_{false};
  absl::Notification stop_probe_;
  std::thread probe_;
  int port_ = 0;
};

// Something a service runs beside its host in the same process (an embedded sidecar):
// started once the host is up, announced as the address callers use, stopped first.
class Companion {
 public:
  virtual ~Companion() = default;
  virtual int port() const = 0;
  virtual const std::string& listen_address() const = 0;
  virtual absl::Status Shutdown(int64_t drain_ms) = 0;
};
using StartCompanion =
    std::function<absl::StatusOr<std::unique_ptr<Companion>>(ServiceHost& host)>;
struct CompanionSpec {
  // Asked once the flags are parsed: whether a companion runs. Null: none.
  std::function<bool()> wanted;
  StartCompanion start;
};

// The business socket of a service with a companion and no --listen: in its data
// directory, its own user's.
inline constexpr char kBusinessSocketName[] = "business.sock";

// The main() of a business service: flags (--listen, --data_dir, --legacy, --drain_ms and
// the chaos flags), signals, and a graceful shutdown. With a companion the business port
// is one_door, unix:<data_dir>/business.sock unless --listen names another.
int RunServiceMain(int argc, char** argv, const char* name, const char* default_listen,
                   std::vector<ColumnFamilySpec> families, const ServiceHost::Setup& setup,
                   const CompanionSpec& companion = {});

}  // namespace eonce

#endif  // EONCE_SERVICES_INBOX_SERVICE_HOST_H_
