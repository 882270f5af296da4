// The sidecar's gRPC face: the Sidecar and SidecarAdmin services, transparent mode, and
// SidecarServer, which owns the store, the audit log, the policy, the upstream channel
// and the Deduper and tears them down in order.
//
// Transparent mode: any other unary method sent to the sidecar that the business's own
// catalog lists (never one of eonce's or gRPC's services) is forwarded to the same method
// upstream (transparent_service.h). With an `idempotency-key` header it goes through the
// Deduper like a Submit; without one it is passed through only to a method the policy
// lists readonly while `refuse_unkeyed_mutations` is set (the default), else refused with
// FAILED_PRECONDITION.
#ifndef EONCE_DEDUPE_SIDECAR_DOORS_SIDECAR_SERVICE_H_
#define EONCE_DEDUPE_SIDECAR_DOORS_SIDECAR_SERVICE_H_

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "common/rpc/admission.h"
#include "common/base/clock.h"
#include "common/base/fault.h"
#include "common/base/metrics.h"
#include "common/store/rocks.h"
#include "common/rpc/server.h"
#include "common/rpc/tls.h"
#include "common/base/work_pool.h"
#include "dedupe_sidecar/authz/audit_log.h"
#include "dedupe_sidecar/core/deduper.h"
#include "dedupe_sidecar/upstream/grpc_upstream.h"
#include "dedupe_sidecar/authz/policy.h"
#include "dedupe_sidecar/store/record_store.h"
#include "common/coord/etcd_map_store.h"
#include "common/coord/map_store.h"
#include "dedupe_sidecar/sharding/shard_coordinator.h"
#include "dedupe_sidecar/sharding/shard_gate.h"
#include "dedupe_sidecar/upstream/upstream.h"
#include "eonce/v1/sidecar.grpc.pb.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/server.h"

namespace eonce {

struct SidecarServerOptions {
  std::string listen_address = "127.0.0.1:0";
  std::string upstream_address;
  std::string data_dir;
  std::string policy_file;
  RetentionOptions retention;
  int64_t audit_retention_ms = 90LL * 24 * 3600 * 1000;
  DeduperOptions deduper;
  bool refuse_unkeyed_mutations = true;
  int max_message_bytes = 4 << 20;
  // Forwards to a business that serves eonce.v1.Forwards: while this many calls to it
  // are in flight, the forwards that arrive meanwhile go together in one ForwardBatch
  // call (GrpcUpstream). 0: every forward is a call of its own. At most 64.
  int forward_batch_calls = 4;
  int max_concurrent_streams = 1024;
  // Calls in flight (Submit and transparent mode), in all and per tenant; past either a
  // call is refused with RESOURCE_EXHAUSTED before anything is written (Admission).
  int max_in_flight = 1024;
  int max_in_flight_per_tenant = 256;
  // The memory gRPC may use for this server's calls (a gRPC resource quota).
  int64_t memory_quota_bytes = 256ll << 20;
  int64_t policy_reload_ms = 1'000;
  // How often every column family is force-compacted. 0 (the default) leaves it to
  // RocksDB's periodic compaction, which rewrites every file at least every 6 hours, so
  // expired records go even when no writes arrive, without a full rewrite every hour.
  int64_t compaction_interval_ms = 0;
  // At start, read the records into the block cache (up to 7/8 of it) on a thread of its
  // own, so that the retries which follow a restart find their answers in memory.
  bool warm_cache = true;
  // The block cache for the records' data blocks (StoreOptions::block_cache_bytes).
  size_t block_cache_bytes = StoreOptions().block_cache_bytes;
  // The records of the commands finished most recently, kept in memory for their retries
  // (FinishedAnswers); 0 for none.
  size_t finished_cache_bytes = FinishedAnswers::kDefaultMaxBytes;
  // Prometheus endpoint, "host:port"; empty: none.
  std::string metrics_address;
  // How often the store is probed with a synced write; a failure turns readiness false.
  int64_t health_probe_ms = 1'000;
  // How often a background step verifies the next events of the audit chain (at most
  // kAuditVerifyStepEvents a step); 0 = never. A broken link sets the
  // eonce_sidecar_audit_chain_broken gauge.
  int64_t audit_verify_interval_ms = 60'000;
  static constexpr uint32_t kAuditVerifyStepEvents = 10'000;
  // Mutual TLS on the listening port (callers' tenants come from their certificates) and
  // towards the business service; empty: plaintext, which a listen_address other hosts
  // can reach is refused without `insecure` (common/rpc/server_security.h).
  TlsFiles tls;
  // --insecure: plaintext on any address, identities from headers; eonce_insecure is 1.
  bool insecure = false;
  // The setting listen_address came from, for the message that refuses it.
  std::string listen_flag = "listen";
  // A plaintext grpc.health.v1-only port for probes without a client certificate;
  // empty: none.
  std::string health_address;
  // Free space kept on the store's disk; below it writes are refused (STORE_FULL).
  uint64_t min_free_bytes = 256ull << 20;
  // Sharding (slots.proto): this sidecar's shard id; empty: every command is taken. The
  // slot map and the shard's lease are in the coordination store: etcd at etcd_endpoints
  // (comma list) under etcd_prefix, or, for tests and the simulation, the store and lease
  // handed in (both, outliving the server). Commands are taken only while the lease is
  // held (lease_ttl_ms; shard_coordinator.h).
  std::string shard_id;
  std::string etcd_endpoints;
  std::string etcd_prefix = "/eonce/default";
  int64_t lease_ttl_ms = 10'000;
  int64_t etcd_timeout_ms = 2'000;  // each etcd call's deadline
  TlsFiles etcd_tls;                // mutual TLS to etcd (its own CA); none: plaintext
  MapStore* map_store = nullptr;
  ShardLease* shard_lease = nullptr;
  // The business behind this sidecar is this shard's alone (a pod's own ledger): its data
  // by slot (eonce.v1.SlotData) moves with the slot's records. Off where every shard's
  // sidecar fronts one shared business, whose data must stay where it is.
  bool move_business_data = false;
  // A RocksDB Env for the store (tests inject failing writes); null: the default.
  rocksdb::Env* store_env = nullptr;
  // The simulation hands in its own upstream; null = gRPC to upstream_address.
  Upstream* upstream = nullptr;
  FaultInjector* faults = nullptr;
};

// Checks settings that cannot work together; names the setting.
absl::Status ValidateSidecarOptions(const SidecarServerOptions& options);

class SidecarServer {
 public:
  static absl::StatusOr<std::unique_ptr<SidecarServer>> Start(SidecarServerOptions options,
                                                             Clock& clock);
  ~SidecarServer();

  int port() const { return port_; }
  int metrics_port() const { return metrics_ != nullptr ? metrics_->port() : 0; }
  int health_port() const { return health_port_ != nullptr ? health_port_->port() : 0; }
  bool serving() const { return serving_.load(); }
  Deduper& deduper() { return *deduper_; }
  AuditLog& audit() { return *audit_; }
  RecordStore& records() { return *records_; }
  PolicyStore& policy() { return *policy_; }
  // Null unless sharded.
  ShardGate* shards() { return shards_.get(); }
  // Sharded: waits up to `limit` until this sidecar holds its shard's lease and serves a map
  // of at least `epoch` it acknowledged (tests and tools that start sidecars).
  bool AwaitShardServing(uint64_t epoch, absl::Duration limit) {
    return coordinator_ != nullptr && coordinator_->AwaitServing(epoch, limit);
  }
  RocksStore& rocks() { return *rocks_; }

  // Waits (at most `limit`) until the business's catalog of methods is not being read
  // (GrpcUpstream::AwaitCatalog); true at once when the options handed in the upstream.
  bool AwaitCatalog(absl::Duration limit) {
    return owned_upstream_ == nullptr || owned_upstream_->AwaitCatalog(limit);
  }

  // Drains: readiness goes false, new calls get UNAVAILABLE, in-flight calls get up to
  // `drain_ms`, then the audit log and the store are flushed and closed.
  absl::Status Shutdown(int64_t drain_ms);

 private:
  SidecarServer() = default;
  void Maintenance(const SidecarServerOptions& options);
  // Reads the records into the block cache (options.warm_cache) on warmer_; stops at
  // Shutdown.
  void WarmCache();
  std::vector<prometheus::MetricFamily> Collect() const;
  // The coordination thread: the shard's lease and the slot map (shard_coordinator.h).
  absl::Status StartCoordination(const SidecarServerOptions& options, Clock& clock);
  // A synced write to a probe key: can the store take writes now?
  void ProbeStore();

  std::unique_ptr<RecordStoreFilters> filters_;
  std::unique_ptr<RocksStore> rocks_;
  std::unique_ptr<RecordStore> records_;
  std::unique_ptr<AuditLog> audit_;
  std::unique_ptr<PolicyStore> policy_;
  std::unique_ptr<GrpcUpstream> owned_upstream_;  // null when the options hand one in
  // Submits and the work after each forward run here: synced writes off gRPC's threads.
  std::unique_ptr<WorkPool> pool_;
  std::unique_ptr<Admission> admission_;
  std::unique_ptr<ShardGate> shards_;
  std::unique_ptr<EtcdCoordination> etcd_;  // null unless sharded on etcd
  std::unique_ptr<ShardLease> owned_lease_;
  // The business the coordinator tells which slots this shard holds (move_business_data).
  std::optional<BusinessSlots> business_slots_;
  std::unique_ptr<ShardCoordinator> coordinator_;  // null unless sharded
  std::unique_ptr<Deduper> deduper_;
  std::atomic<bool> draining_{false};
  std::unique_ptr<v1::Sidecar::CallbackService> sidecar_service_;
  std::unique_ptr<v1::SidecarAdmin::CallbackService> admin_service_;
  std::unique_ptr<grpc::CallbackGenericService> transparent_service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<MetricsEndpoint> metrics_;
  std::unique_ptr<HealthPort> health_port_;
  std::atomic<bool> serving_{false};
  bool insecure_ = false;
  absl::Notification stop_maintenance_;
  std::thread maintenance_;
  std::thread warmer_;  // reads the records into the block cache once, at start
  Clock* clock_ = nullptr;
  int port_ = 0;
};

}  // namespace eonce

#endif  // EONCE_DEDUPE_SIDECAR_DOORS_SIDECAR_SERVICE_H_
