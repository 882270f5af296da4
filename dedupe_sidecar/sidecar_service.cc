#include "dedupe_sidecar/sidecar_service.h"

#include <chrono>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/command.h"
#include "common/grpc_status.h"
#include "common/log.h"
#include "common/server.h"
#include "common/status.h"
#include "common/tls.h"
#include "dedupe_sidecar/caller.h"
#include "dedupe_sidecar/grpc_upstream.h"
#include "dedupe_sidecar/transparent_service.h"
#include "grpcpp/server_builder.h"

namespace eonce {
namespace {

class SidecarServiceImpl : public v1::Sidecar::CallbackService {
 public:
  SidecarServiceImpl(Deduper& deduper, Clock& clock, std::atomic<bool>& draining,
                     Admission& admission, bool identity_from_headers)
      : deduper_(deduper),
        clock_(clock),
        draining_(draining),
        admission_(admission),
        identity_from_headers_(identity_from_headers) {}

  grpc::ServerUnaryReactor* Submit(grpc::CallbackServerContext* context,
                                   const v1::SubmitRequest* request,
                                   v1::SubmitResponse* response) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    if (draining_.load()) {
      reactor->Finish(ToGrpcStatus(Draining(), context));
      return reactor;
    }
    absl::StatusOr<Caller> caller = CallerOf(context, clock_, deduper_);
    if (!caller.ok()) {
      reactor->Finish(ToGrpcStatus(caller.status(), context));
      return reactor;
    }
    // Before anything is written: one tenant's flood must not starve the others.
    absl::StatusOr<Admission::Ticket> admitted = admission_.Admit(caller->tenant);
    if (!admitted.ok()) {
      reactor->Finish(ToGrpcStatus(admitted.status(), context));
      return reactor;
    }
    auto ticket = std::make_shared<Admission::Ticket>(std::move(*admitted));
    // On this callback thread: the Deduper holds a key's lock only while it reads and
    // writes, and waits for no disk (its fsyncs complete on the store's committer thread).
    deduper_.Submit(*caller, request->command(),
                    [context, reactor, response,
                     ticket](absl::StatusOr<v1::SubmitResponse> result) {
                      if (result.ok()) *response = std::move(*result);
                      ticket->Release();
                      reactor->Finish(ToGrpcStatus(result.status(), context));
                    });
    return reactor;
  }

  grpc::ServerUnaryReactor* Reconcile(grpc::CallbackServerContext* context,
                                      const v1::ReconcileRequest* request,
                                      v1::ReconcileResponse* response) override {
    if (draining_.load()) {
      return FinishUnary<v1::ReconcileResponse>(context, Draining(), response);
    }
    absl::StatusOr<Caller> caller = CallerOf(context, clock_, deduper_);
    if (!caller.ok()) return FinishUnary<v1::ReconcileResponse>(context, caller.status(), response);
    return FinishUnary(context, deduper_.Reconcile(*caller, *request), response);
  }

  grpc::ServerUnaryReactor* GetInfo(grpc::CallbackServerContext* context,
                                    const v1::GetInfoRequest* /*request*/,
                                    v1::GetInfoResponse* response) override {
    v1::GetInfoResponse info = deduper_.Info();
    info.set_identity_from_headers(identity_from_headers_);
    return FinishUnary(context, absl::StatusOr<v1::GetInfoResponse>(std::move(info)), response);
  }

 private:
  Deduper& deduper_;
  Clock& clock_;
  std::atomic<bool>& draining_;
  const bool identity_from_headers_;
  Admission& admission_;
};

class SidecarAdminImpl : public v1::SidecarAdmin::CallbackService {
 public:
  SidecarAdminImpl(Deduper& deduper, AuditLog& audit, Clock& clock, WorkPool& pool)
      : deduper_(deduper), audit_(audit), clock_(clock), pool_(pool) {}

  grpc::ServerUnaryReactor* ListParked(grpc::CallbackServerContext* context,
                                       const v1::ListParkedRequest* request,
                                       v1::ListParkedResponse* response) override {
    absl::StatusOr<Caller> caller = CallerOf(context, clock_, deduper_);
    if (!caller.ok())
      return FinishUnary<v1::ListParkedResponse>(context, caller.status(), response);
    return FinishUnary(context, deduper_.ListParked(*caller, request->limit()), response);
  }

  grpc::ServerUnaryReactor* QueryAudit(grpc::CallbackServerContext* context,
                                       const v1::QueryAuditRequest* request,
                                       v1::QueryAuditResponse* response) override {
    absl::StatusOr<Caller> caller = CallerOf(context, clock_, deduper_);
    if (caller.ok()) {
      if (absl::Status allowed = deduper_.RequireOperator(*caller); !allowed.ok()) caller = allowed;
    }
    if (!caller.ok()) {
      return FinishUnary<v1::QueryAuditResponse>(context, caller.status(), response);
    }
    // The query waits for the audit writer (read your writes) and reads the store: on the
    // work pool, not on a gRPC thread.
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    bool posted = pool_.Post([this, context, request, response, reactor,
                              tenant = caller->tenant] {
      absl::StatusOr<std::vector<v1::AuditEvent>> events = audit_.Query(tenant, *request);
      if (events.ok()) {
        for (auto& event : *events) *response->add_events() = std::move(event);
      }
      reactor->Finish(ToGrpcStatus(events.status(), context));
    });
    if (!posted) reactor->Finish(ToGrpcStatus(PoolFull("audit queries"), context));
    return reactor;
  }

  grpc::ServerUnaryReactor* VerifyAudit(grpc::CallbackServerContext* context,
                                        const v1::VerifyAuditRequest* request,
                                        v1::VerifyAuditResponse* response) override {
    // The check walks the whole chain but answers only whether it holds and how long it
    // is; still, only an operator may ask.
    absl::StatusOr<Caller> caller = CallerOf(context, clock_, deduper_);
    if (caller.ok()) {
      if (absl::Status allowed = deduper_.RequireOperator(*caller); !allowed.ok()) caller = allowed;
    }
    if (!caller.ok())
      return FinishUnary<v1::VerifyAuditResponse>(context, caller.status(), response);
    // A long scan: on the work pool, not on a gRPC thread, and bounded per call.
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    bool posted = pool_.Post([this, context, request, response, reactor] {
      absl::StatusOr<v1::VerifyAuditResponse> result =
          audit_.Verify(request->after_seq(), request->max_events());
      if (result.ok()) *response = std::move(*result);
      reactor->Finish(ToGrpcStatus(result.status(), context));
    });
    if (!posted) {
      reactor->Finish(ToGrpcStatus(PoolFull("audit verifications"), context));
    }
    return reactor;
  }

  grpc::ServerUnaryReactor* ResolveParked(grpc::CallbackServerContext* context,
                                          const v1::ResolveParkedRequest* request,
                                          v1::ResolveParkedResponse* response) override {
    absl::StatusOr<Caller> caller = CallerOf(context, clock_, deduper_);
    if (!caller.ok()) {
      return FinishUnary<v1::ResolveParkedResponse>(context, caller.status(), response);
    }
    return FinishUnary(context, deduper_.ResolveParked(*caller, *request), response);
  }

 private:
  Deduper& deduper_;
  AuditLog& audit_;
  Clock& clock_;
  WorkPool& pool_;
};

// One transparent-mode call: read the request, decide, write the answer.
}  // namespace

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
  if (o.max_in_flight < 1 || o.max_in_flight_per_tenant < 1 ||
      o.max_in_flight_per_tenant > o.max_in_flight) {
    return absl::InvalidArgumentError(
        "max_in_flight_per_tenant: must be at least 1 and at most max_in_flight");
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
  std::unique_ptr<SidecarServer> s(new SidecarServer());
  s->clock_ = &clock;
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
  store_options.min_free_bytes = options.store_env == nullptr ? options.min_free_bytes : 0;
  EONCE_ASSIGN_OR_RETURN(s->rocks_, RocksStore::Open(options.data_dir, families, store_options));
  s->records_ = std::make_unique<RecordStore>(*s->rocks_, clock, options.retention);
  EONCE_RETURN_IF_ERROR(s->records_->SettleRetention());
  s->audit_ = std::make_unique<AuditLog>(*s->rocks_, clock, options.audit_retention_ms);
  Upstream* upstream = options.upstream;
  if (upstream == nullptr) {
    // A business on a unix socket is reached in the pod's shared volume, which only its
    // containers mount and the socket's file mode guards; TLS adds nothing there.
    const bool local_socket = absl::StartsWith(options.upstream_address, "unix:");
    s->owned_upstream_ = std::make_unique<GrpcUpstream>(
        options.upstream_address, local_socket ? TlsFiles() : options.tls, clock,
        options.max_message_bytes);
    upstream = s->owned_upstream_.get();
  }
  // For the operator's long scans (audit queries and verification) only: a Submit runs on
  // gRPC's threads, and the business's answers are handled where they arrive.
  s->pool_ = std::make_unique<WorkPool>(4, 256);
  s->deduper_ = std::make_unique<Deduper>(*s->records_, *s->audit_, *upstream, *s->policy_,
                                          clock, options.deduper, options.faults);
  s->admission_ = std::make_unique<Admission>(options.max_in_flight,
                                              options.max_in_flight_per_tenant);
  if (!options.tls.enabled()) {
    LogWarn("NO MUTUAL TLS: identities are taken from request headers (eonce-tenant, "
            "eonce-workload, eonce-actor, eonce-operator, eonce-credential-epoch) and trusted "
            "as they are; development only. GetInfo reports identity_from_headers=true");
  }
  s->sidecar_service_ = std::make_unique<SidecarServiceImpl>(
      *s->deduper_, clock, s->draining_, *s->admission_, !options.tls.enabled());
  s->admin_service_ =
      std::make_unique<SidecarAdminImpl>(*s->deduper_, *s->audit_, clock, *s->pool_);
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
  s->maintenance_ = std::thread([raw = s.get(), options] { raw->Maintenance(options); });
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

std::vector<prometheus::MetricFamily> SidecarServer::Collect() const {
  const DeduperStats& st = deduper_->stats();
  auto n = [](const std::atomic<int64_t>& v) { return static_cast<double>(v.load()); };
  std::vector<prometheus::MetricFamily> out;
  out.push_back(CounterFamily(
      "eonce_sidecar_submits_total", "Submits by outcome.",
      {{{{"outcome", "applied"}}, n(st.applied)},
       {{{"outcome", "rejected"}}, n(st.rejected)},
       {{{"outcome", "replayed"}}, n(st.replayed)},
       {{{"outcome", "conflict"}}, n(st.conflicts)},
       {{{"outcome", "in_progress"}}, n(st.in_progress)},
       {{{"outcome", "expired"}}, n(st.expired)},
       {{{"outcome", "denied"}}, n(st.denied)},
       {{{"outcome", "invalid"}}, n(st.invalid)},
       {{{"outcome", "parked"}}, n(st.parked)},
       {{{"outcome", "outcome_pending"}}, n(st.pending)},
       {{{"outcome", "upstream_unavailable"}}, n(st.upstream_unavailable)},
       {{{"outcome", "upstream_refused"}}, n(st.refused)},
       {{{"outcome", "store_error"}}, n(st.store_errors)}}));
  out.push_back(CounterFamily("eonce_sidecar_dedupe_hits_total",
                              "Duplicates answered from a stored record.", {{{}, n(st.replayed)}}));
  out.push_back(CounterFamily("eonce_sidecar_conflicts_total",
                              "Keys reused with another payload or command id.",
                              {{{}, n(st.conflicts)}}));
  out.push_back(CounterFamily("eonce_sidecar_in_progress_total",
                              "Duplicates answered IN_PROGRESS.", {{{}, n(st.in_progress)}}));
  out.push_back(CounterFamily("eonce_sidecar_authorization_denials_total",
                              "Submits refused by the policy or the caller's identity.",
                              {{{}, n(st.denied)}}));
  out.push_back(CounterFamily("eonce_sidecar_admission_refused_total",
                              "Calls refused because too many were in flight (in all or for "
                              "their tenant); nothing was recorded.",
                              {{{}, static_cast<double>(admission_->refused())}}));
  out.push_back(GaugeFamily("eonce_sidecar_calls_in_flight", "Calls admitted and not yet answered.",
                            {{{}, static_cast<double>(admission_->in_flight())}}));
  out.push_back(CounterFamily("eonce_sidecar_forwards_total", "Calls forwarded to the business.",
                              {{{}, n(st.forwards)}}));
  out.push_back(CounterFamily(
      "eonce_sidecar_forwards_before_sync_total",
      "Calls forwarded before their started record was synced: the business keeps an inbox "
      "and its write is the commit point.",
      {{{}, n(st.forwards_before_sync)}}));
  out.push_back(CounterFamily("eonce_sidecar_recovered_total",
                              "Unknown outcomes resolved through QueryOutcome.", {{{}, n(st.recovered)}}));
  out.push_back(CounterFamily("eonce_sidecar_fenced_answers_total",
                              "Late answers refused by their fencing token.", {{{}, n(st.fenced)}}));
  out.push_back(st.forward_latency.Family("eonce_sidecar_forward_duration_seconds",
                                          "Time from forwarding a call to its answer."));
  out.push_back(GaugeFamily("eonce_sidecar_parked_records",
                            "Records whose outcome is unknown, waiting for an operator.",
                            {{{}, static_cast<double>(records_->parked_count())}}));
  out.push_back(CounterFamily("eonce_sidecar_compaction_expired_total",
                              "Records whose response body compaction dropped (tombstoned).",
                              {{{}, static_cast<double>(filters_->stats.trimmed.load())}}));
  out.push_back(CounterFamily("eonce_sidecar_compaction_dropped_total",
                              "Entries compaction dropped at the end of their retention.",
                              {{{}, static_cast<double>(filters_->stats.dropped.load())}}));
  out.push_back(GaugeFamily("eonce_sidecar_store_size_bytes", "RocksDB live SST and memtable bytes.",
                            {{{}, static_cast<double>(rocks_->ApproximateBytes())}}));
  out.push_back(CounterFamily("eonce_sidecar_audit_events_total", "Audit events appended.",
                              {{{}, static_cast<double>(audit_->appended())}}));
  out.push_back(GaugeFamily("eonce_sidecar_ready", "1 when serving, 0 when not ready.",
                            {{{}, serving_.load() ? 1.0 : 0.0}}));
  out.push_back(GaugeFamily("eonce_sidecar_audit_chain_broken",
                            "1 once a verification found the audit chain broken.",
                            {{{}, audit_->chain_broken() ? 1.0 : 0.0}}));
  out.push_back(GaugeFamily("eonce_sidecar_retention_seconds",
                            "The retention the sidecar advertises (GetInfo): duplicates are "
                            "recognised at least this long.",
                            {{{}, records_->advertised_retention_ms() / 1000.0}}));
  return out;
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

absl::Status SidecarServer::Shutdown(int64_t drain_ms) {
  draining_ = true;
  serving_ = false;
  // The maintenance thread touches the server's health status: stop it first.
  if (maintenance_.joinable()) {
    stop_maintenance_.Notify();
    maintenance_.join();
  }
  StopServing(server_, health_port_, drain_ms);
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
