// The sidecar server's lifecycle: options, start (store, records, audit, policy, upstream,
// Deduper, services), the store probe, the maintenance loop and the drain. The gRPC
// services are in sidecar_grpc.cc, the metrics in sidecar_metrics.cc.
#include "dedupe_sidecar/doors/sidecar_service.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/clock.h"
#include "common/base/log.h"
#include "common/rpc/server.h"
#include "common/rpc/server_security.h"
#include "common/base/status.h"
#include "common/rpc/tls.h"
#include "dedupe_sidecar/upstream/grpc_upstream.h"
#include "dedupe_sidecar/doors/sidecar_grpc.h"
#include "dedupe_sidecar/doors/transparent_service.h"
#include "grpcpp/server_builder.h"

namespace eonce {

absl::Status ValidateSidecarOptions(const SidecarServerOptions& o) {
  if (o.data_dir.empty()) return absl::InvalidArgumentError("data_dir: required");
  EONCE_RETURN_IF_ERROR(ValidateTlsFiles(o.tls));
  if (o.upstream == nullptr && o.upstream_address.empty()) {
    return absl::InvalidArgumentError("upstream: required (the business service's address)");
  }
  if (o.retention.retention_ms <= 0) {
    return absl::InvalidArgumentError("retention_ms: must be positive");
  }
  if (o.retention.forensic_retention_ms < o.retention.retention_ms) {
    return absl::InvalidArgumentError(
        "forensic_retention_ms: must not be shorter than retention_ms");
  }
  EONCE_RETURN_IF_ERROR(ValidateDeduperOptions(o.deduper));
  const bool injected = o.map_store != nullptr || o.shard_lease != nullptr;
  if (injected && (o.map_store == nullptr || o.shard_lease == nullptr)) {
    return absl::InvalidArgumentError("map_store, shard_lease: hand in both or neither");
  }
  if (!o.shard_id.empty() && o.etcd_endpoints.empty() && !injected) {
    return absl::InvalidArgumentError(
        "etcd_endpoints: a sharded sidecar (shard_id) needs the coordination store that holds "
        "the slot map and its lease");
  }
  if (o.shard_id.empty() && (!o.etcd_endpoints.empty() || injected)) {
    return absl::InvalidArgumentError(
        "shard_id: etcd_endpoints is for a sharded sidecar; name its shard");
  }
  if (o.move_business_data && o.shard_id.empty()) {
    return absl::InvalidArgumentError(
        "move_business_data: only a sharded sidecar (shard_id, etcd_endpoints) moves slots");
  }
  if (o.max_in_flight < 1 || o.max_in_flight_per_tenant < 1 ||
      o.max_in_flight_per_tenant > o.max_in_flight) {
    return absl::InvalidArgumentError(
        "max_in_flight_per_tenant: must be at least 1 and at most max_in_flight");
  }
  if (o.forward_batch_calls < 0 || o.forward_batch_calls > 64) {
    return absl::InvalidArgumentError("forward_batch_calls: must be between 0 and 64");
  }
  if (o.block_cache_bytes < (size_t{8} << 20) || o.block_cache_bytes > (size_t{64} << 30)) {
    return absl::InvalidArgumentError("block_cache_mb: must be between 8 and 65536");
  }
  if (o.finished_cache_bytes > (size_t{64} << 30)) {
    return absl::InvalidArgumentError("finished_cache_mb: must be between 0 and 65536");
  }
  if (o.memory_quota_bytes < (16ll << 20)) {
    return absl::InvalidArgumentError("memory_quota_mb: must be at least 16");
  }
  if (o.deduper.limits.max_request_bytes + 64 * 1024 > static_cast<size_t>(o.max_message_bytes)) {
    return absl::InvalidArgumentError(
        "max_message_bytes: must exceed max_request_bytes by at least 64 KiB of envelope");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<SidecarServer>> SidecarServer::Start(SidecarServerOptions options,
                                                                   Clock& clock) {
  EONCE_RETURN_IF_ERROR(ValidateSidecarOptions(options));
  const ListenRules rules{options.insecure};
  EONCE_ASSIGN_OR_RETURN(ListenerTrust trust, DecideListenerTrust(options.listen_flag,
                                                                  options.listen_address,
                                                                  options.tls, rules));
  // Over mutual TLS the sidecar serves other hosts: there, the development default of no
  // policy (every workload may act for every actor, every named operator operates for
  // every tenant and moves slots) would hand any certificate the CA signed every right.
  if (trust == ListenerTrust::kCertificates && options.policy_file.empty()) {
    return absl::InvalidArgumentError(
        "--policy_file: required with mutual TLS (--tls_cert, --tls_key, --tls_ca); without "
        "one every workload could act for every actor and every operator for every tenant");
  }
  std::unique_ptr<SidecarServer> s(new SidecarServer());
  s->clock_ = &clock;
  s->insecure_ = options.insecure;
  EONCE_ASSIGN_OR_RETURN(s->policy_, PolicyStore::Open(options.policy_file));
  if (options.policy_file.empty()) {
    LogWarn("no policy file: every tenant and actor may run every method with an "
            "idempotency key; calls without one are refused (no method is listed readonly)");
  }
  s->filters_ = std::make_unique<RecordStoreFilters>(clock);
  auto families = RecordStore::ColumnFamilies(*s->filters_);
  for (auto& family : AuditLog::ColumnFamilies(*s->filters_)) families.push_back(family);
  StoreOptions store_options;
  store_options.env = options.store_env;
  store_options.block_cache_bytes = options.block_cache_bytes;
  store_options.min_free_bytes = options.store_env == nullptr ? options.min_free_bytes : 0;
  EONCE_ASSIGN_OR_RETURN(s->rocks_, RocksStore::Open(options.data_dir, families, store_options));
  s->records_ = std::make_unique<RecordStore>(*s->rocks_, clock, options.retention,
                                              options.finished_cache_bytes);
  EONCE_RETURN_IF_ERROR(s->records_->SettleRetention());
  s->audit_ = std::make_unique<AuditLog>(*s->rocks_, clock, options.audit_retention_ms);
  Upstream* upstream = options.upstream;
  if (upstream == nullptr) {
    // A business on a unix socket is reached in the pod's shared volume, which only its
    // containers mount and the socket's file mode guards; TLS adds nothing there.
    const bool local_socket = absl::StartsWith(options.upstream_address, "unix:");
    s->owned_upstream_ = std::make_unique<GrpcUpstream>(
        options.upstream_address, local_socket ? TlsFiles() : options.tls, clock,
        options.max_message_bytes, options.forward_batch_calls);
    upstream = s->owned_upstream_.get();
    // The business's methods, read before the first command comes, so that it is checked
    // rather than told to come back. Bounded: a business that is down or slow is read in
    // the background, and commands meanwhile are answered CATALOG_PENDING.
    s->owned_upstream_->AwaitCatalog(absl::Seconds(2));
  }
  // For the operator's long scans (audit queries and verification) only: a Submit runs on
  // gRPC's threads, and the business's answers are handled where they arrive.
  s->pool_ = std::make_unique<WorkPool>(4, 256);
  if (!options.shard_id.empty()) {
    // The map last adopted is kept beside the records: a cache, so a restart never goes
    // back to an older map; nothing is let in until the lease is held.
    EONCE_ASSIGN_OR_RETURN(s->shards_, ShardGate::Open(options.shard_id,
                                                       options.data_dir + "/slot_map.json",
                                                       clock));
  }
  s->deduper_ = std::make_unique<Deduper>(*s->records_, *s->audit_, *upstream, *s->policy_,
                                          clock, options.deduper, options.faults,
                                          s->shards_.get());
  s->admission_ = std::make_unique<Admission>(options.max_in_flight,
                                              options.max_in_flight_per_tenant);
  // Without TLS the headers (eonce-tenant, eonce-workload, eonce-actor, eonce-operator,
  // eonce-credential-epoch) are trusted as they are; GetInfo reports
  // identity_from_headers=true.
  LogListenerTrust("sidecar", options.listen_address, trust, rules);
  s->sidecar_service_ = NewSidecarService(*s->deduper_, clock, s->draining_, *s->admission_,
                                          !options.tls.enabled(), options.max_message_bytes);
  s->admin_service_ = NewSidecarAdminService(*s->deduper_, *s->records_, *s->audit_, clock,
                                             *s->pool_, *upstream,
                                             options.move_business_data ? upstream : nullptr);
  s->transparent_service_ = std::make_unique<TransparentService>(
      *s->deduper_, *upstream, *s->policy_, clock, options.refuse_unkeyed_mutations,
      options.deduper.forward_timeout_ms, s->draining_, *s->admission_);

  EnableStandardServices();
  grpc::ServerBuilder builder;
  EONCE_RETURN_IF_ERROR(AddListener(builder, options.listen_address, options.tls, &s->port_));
  ApplyServerLimits(builder, options.max_message_bytes, options.max_concurrent_streams,
                    options.memory_quota_bytes);
  builder.RegisterService(s->sidecar_service_.get());
  builder.RegisterService(s->admin_service_.get());
  builder.RegisterCallbackGenericService(s->transparent_service_.get());
  EONCE_ASSIGN_OR_RETURN(s->server_, BuildAndServe(builder, options.listen_address));
  s->serving_ = true;
  if (!options.health_address.empty()) {
    EONCE_ASSIGN_OR_RETURN(s->health_port_, HealthPort::Start(options.health_address));
  }
  if (!options.metrics_address.empty()) {
    SidecarServer* raw = s.get();
    EONCE_ASSIGN_OR_RETURN(s->metrics_, MetricsEndpoint::Start(options.metrics_address,
                                                               [raw] { return raw->Collect(); }));
  }
  if (s->shards_ != nullptr) {
    if (options.move_business_data) s->business_slots_.emplace(BusinessSlots{*upstream, clock});
    EONCE_RETURN_IF_ERROR(s->StartCoordination(options, clock));
  }
  s->maintenance_ = std::thread([raw = s.get(), options] { raw->Maintenance(options); });
  // A thread of its own, so that a long scan never delays the store's health probes.
  if (options.warm_cache) s->warmer_ = std::thread([raw = s.get()] { raw->WarmCache(); });
  return s;
}

void SidecarServer::ProbeStore() {
  absl::Status written = rocks_->ProbeWrite();
  bool ok = written.ok() && !draining_.load();
  if (ok != serving_.exchange(ok)) {
    if (server_ != nullptr) SetServing(*server_, health_port_.get(), ok);
    if (ok) {
      LogInfo("store writable again; ready");
    } else {
      LogError("store not writable; not ready", {{"error", std::string(written.message())}});
    }
  }
}

void SidecarServer::WarmCache() {
  const int64_t started = clock_->NowMs();
  absl::StatusOr<size_t> cached =
      records_->WarmCache([this] { return stop_maintenance_.HasBeenNotified(); });
  if (!cached.ok()) {
    LogError("warming the block cache failed", {{"error", std::string(cached.status().message())}});
    return;
  }
  LogInfo("block cache warmed", {{"bytes", absl::StrCat(*cached)},
                                 {"ms", absl::StrCat(clock_->NowMs() - started)}});
}

void SidecarServer::Maintenance(const SidecarServerOptions& options) {
  // On the injected clock; the loop's tick is a wait, not a reading of time.
  int64_t last_compaction = clock_->NowMs();
  int64_t last_probe = last_compaction;
  int64_t last_audit_step = last_compaction;
  int64_t tick_ms =
      std::max<int64_t>(20, std::min(options.policy_reload_ms, options.health_probe_ms));
  auto due = [this](int64_t& last, int64_t interval_ms) {
    if (interval_ms <= 0) return false;
    const int64_t now = clock_->NowMs();
    if (now - last < interval_ms) return false;
    last = now;
    return true;
  };
  while (!stop_maintenance_.WaitForNotificationWithTimeout(absl::Milliseconds(tick_ms))) {
    if (due(last_probe, options.health_probe_ms)) ProbeStore();
    if (absl::Status reloaded = policy_->MaybeReload(); !reloaded.ok()) {
      LogError("policy reload failed; keeping the previous policy",
               {{"error", std::string(reloaded.message())}});
    }
    if (due(last_compaction, options.compaction_interval_ms)) {
      if (absl::Status compacted = records_->CompactAll(); !compacted.ok()) {
        LogError("compaction failed", {{"error", std::string(compacted.message())}});
      }
    }
    if (due(last_audit_step, options.audit_verify_interval_ms)) {
      const bool was_broken = audit_->chain_broken();
      if (absl::Status step = audit_->VerifyStep(SidecarServerOptions::kAuditVerifyStepEvents);
          !step.ok()) {
        LogError("audit verification failed", {{"error", std::string(step.message())}});
      }
      if (!was_broken && audit_->chain_broken()) {
        LogError("the audit chain is broken: an event was changed or deleted; "
                 "sidecarctl verify-audit shows where");
      }
    }
  }
}

absl::Status SidecarServer::StartCoordination(const SidecarServerOptions& options,
                                              Clock& clock) {
  MapStore* store = options.map_store;
  ShardLease* lease = options.shard_lease;
  if (store == nullptr) {
    EtcdCoordOptions etcd;
    etcd.endpoints = options.etcd_endpoints;
    etcd.prefix = options.etcd_prefix;
    etcd.lease_ttl_ms = options.lease_ttl_ms;
    etcd.call_timeout_ms = options.etcd_timeout_ms;
    etcd.tls = options.etcd_tls;
    EONCE_ASSIGN_OR_RETURN(etcd_, EtcdCoordination::Create(etcd, clock));
    owned_lease_ = etcd_->NewLease();
    store = &etcd_->store();
    lease = owned_lease_.get();
  }
  ShardCoordinatorOptions coordination;
  coordination.shard = options.shard_id;
  // Informational (movers use the map's addresses): where this process listens.
  coordination.address = options.listen_address;
  if (absl::EndsWith(coordination.address, ":0")) {
    coordination.address.replace(coordination.address.size() - 1, 1, absl::StrCat(port_));
  }
  coordination.lease_ttl_ms = options.lease_ttl_ms;
  shards_->SetStoreReader([store] { return store->Read(); });
  coordinator_ =
      std::make_unique<ShardCoordinator>(*shards_, *store, *lease, clock, coordination,
                                         business_slots_.has_value() ? &*business_slots_
                                                                     : nullptr);
  coordinator_->Start();
  return absl::OkStatus();
}

absl::Status SidecarServer::Shutdown(int64_t drain_ms) {
  draining_ = true;
  serving_ = false;
  // The maintenance thread touches the server's health status: stop it first.
  // Shutdown runs twice (the destructor calls it too); a Notification takes one Notify.
  if (!stop_maintenance_.HasBeenNotified()) stop_maintenance_.Notify();  // and the warm-up
  // The shard's lease goes back at once: its successor need not wait for it to lapse.
  if (coordinator_ != nullptr) coordinator_->Stop();
  if (maintenance_.joinable()) maintenance_.join();
  if (warmer_.joinable()) warmer_.join();
  StopServing(server_, health_port_, drain_ms);
  // What is still in flight to the business (work of the background, not of a call)
  // ends before the store does: a late answer still finds it.
  if (owned_upstream_ != nullptr) owned_upstream_->Close();
  pool_.reset();  // runs what is queued
  metrics_.reset();
  absl::Status result;
  if (audit_ != nullptr) {
    result = audit_->Flush();
    audit_.reset();
  }
  if (rocks_ != nullptr) {
    absl::Status closed = rocks_->Close();
    if (result.ok()) result = closed;
  }
  return result;
}

SidecarServer::~SidecarServer() { Shutdown(0).IgnoreError(); }

}  // namespace eonce
