#include "outbox_agent/agent_server.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/log.h"
#include "common/server.h"
#include "common/status.h"
#include "common/tls.h"
#include "grpcpp/server_builder.h"
#include "outbox_agent/grpc_sidecar_client.h"

namespace eonce {
namespace {

// The largest List page, in record bytes.
constexpr size_t kMaxListBytes = 1 << 20;

absl::StatusOr<OutboxRecord> Found(absl::StatusOr<std::optional<OutboxRecord>> record,
                                   const std::string& id) {
  if (!record.ok()) return record.status();
  if (!record->has_value()) {
    return Error(absl::StatusCode::kNotFound, "NO_SUCH_COMMAND", absl::StrCat("no record ", id));
  }
  return std::move(**record);
}

// One Watch stream. The feed wakes it through a weak pointer and under the stream's own
// mutex, so a notice that races the stream's end finds nothing to call. StartWrite is
// called under that mutex (its completion never runs inline); Finish is not, because
// OnDone may follow it at once.
class WatchReactor : public grpc::ServerWriteReactor<v1::WatchEvent> {
 public:
  explicit WatchReactor(StateFeed& feed) : feed_(feed), shared_(std::make_shared<Shared>()) {
    shared_->reactor = this;
    std::weak_ptr<Shared> weak = shared_;
    subscription_ = feed_.Subscribe([weak] {
      auto shared = weak.lock();
      if (shared == nullptr) return;
      WatchReactor* reactor = nullptr;
      bool finish = false;
      {
        absl::MutexLock lock(&shared->mu);
        reactor = shared->reactor;
        if (reactor != nullptr) finish = reactor->MaybeWriteLocked();
      }
      if (finish) reactor->FinishCutOff();
    });
    if (subscription_ == nullptr) {
      {
        absl::MutexLock lock(&shared_->mu);
        finished_ = true;
      }
      Finish(ToGrpcStatus(WithRetryAfter(Error(absl::StatusCode::kResourceExhausted,
                                               "TOO_MANY_WATCHERS", "too many watchers"),
                                         1'000),
                          nullptr));
      return;
    }
    MaybeWrite();
  }

  void OnWriteDone(bool ok) override {
    {
      absl::MutexLock lock(&shared_->mu);
      writing_ = false;
      if (!ok) finished_ = true;  // the client went away; OnCancel or OnDone follows
    }
    MaybeWrite();
  }

  void OnCancel() override {
    bool finish = false;
    {
      absl::MutexLock lock(&shared_->mu);
      if (!finished_) finish = finished_ = true;
    }
    if (finish) Finish(grpc::Status::CANCELLED);
  }

  void OnDone() override {
    {
      absl::MutexLock lock(&shared_->mu);
      shared_->reactor = nullptr;
    }
    if (subscription_ != nullptr) feed_.Unsubscribe(subscription_);
    delete this;
  }

 private:
  struct Shared {
    absl::Mutex mu;
    WatchReactor* reactor = nullptr;
  };

  // Starts the next write if there is one; true when the stream must be finished.
  bool MaybeWriteLocked() {
    if (writing_ || finished_) return false;
    if (subscription_->Next(&current_, 0)) {
      writing_ = true;
      StartWrite(&current_);
      return false;
    }
    if (subscription_->cut_off()) {
      finished_ = true;
      return true;
    }
    return false;
  }

  void MaybeWrite() {
    bool finish = false;
    {
      absl::MutexLock lock(&shared_->mu);
      finish = MaybeWriteLocked();
    }
    if (finish) FinishCutOff();
  }

  void FinishCutOff() {
    Finish(ToGrpcStatus(
        WithRetryAfter(Error(absl::StatusCode::kResourceExhausted, "WATCHER_BEHIND",
                             "the watcher fell behind; re-read the store and watch again"),
                       0),
        nullptr));
  }

  StateFeed& feed_;
  std::shared_ptr<Shared> shared_;
  std::shared_ptr<StateFeed::Subscription> subscription_;
  v1::WatchEvent current_;
  bool writing_ = false;   // guarded by shared_->mu
  bool finished_ = false;  // guarded by shared_->mu
};

// A Watch refused before it started.
class RefusedWatch : public grpc::ServerWriteReactor<v1::WatchEvent> {
 public:
  explicit RefusedWatch(grpc::Status status) { Finish(std::move(status)); }
  void OnDone() override { delete this; }
};

class AgentServiceImpl : public v1::Agent::CallbackService {
 public:
  AgentServiceImpl(Outbox& outbox, OutboxStore& store, CredentialState& credential, StateFeed& feed,
                   std::atomic<bool>& draining, std::function<void()> kick, WorkPool& pool,
                   std::string tenant)
      : tenant_(std::move(tenant)),
        pool_(pool),
        outbox_(outbox),
        store_(store),
        credential_(credential),
        feed_(feed),
        draining_(draining),
        kick_(std::move(kick)) {}

  grpc::ServerUnaryReactor* Enqueue(grpc::CallbackServerContext* context,
                                    const v1::EnqueueRequest* request,
                                    v1::EnqueueResponse* response) override {
    return Authorized(context, response, [&]() -> grpc::ServerUnaryReactor* {
      if (draining_.load()) {
        return FinishUnary<v1::EnqueueResponse>(
            context,
            Error(absl::StatusCode::kUnavailable, "DRAINING", "the agent is shutting down"),
            response);
      }
      // The synced write runs on the pool, so that concurrent Enqueues share an fsync.
      grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
      bool posted = pool_.Post([this, context, request, response, reactor] {
        auto result = outbox_.Enqueue(request->command());
        if (result.ok() && result->created()) kick_();
        if (result.ok()) *response = std::move(*result);
        reactor->Finish(ToGrpcStatus(result.status(), context));
      });
      if (!posted) {
        reactor->Finish(ToGrpcStatus(PoolFull("Enqueues"), context));
      }
      return reactor;
    });
  }

  grpc::ServerUnaryReactor* Get(grpc::CallbackServerContext* context,
                                const v1::GetRequest* request, OutboxRecord* response) override {
    return Authorized(context, response, [&]() -> grpc::ServerUnaryReactor* {
      return FinishUnary(context, Found(store_.Get(request->command_id()), request->command_id()),
                         response);
    });
  }

  grpc::ServerUnaryReactor* List(grpc::CallbackServerContext* context,
                                 const v1::ListRequest* request,
                                 v1::ListResponse* response) override {
    return Authorized(context, response, [&]() -> grpc::ServerUnaryReactor* {
      absl::StatusOr<v1::ListResponse> out;
      auto records = store_.List(request->state(), request->after_command_id(), request->limit());
      if (!records.ok()) {
        out = records.status();
      } else {
        // Records carry their requests: a page stops at about 1 MiB, under every
        // message size limit, and says where the next one starts.
        v1::ListResponse list;
        size_t bytes = 0;
        bool cut = false;
        for (auto& r : *records) {
          bytes += r.ByteSizeLong();
          if (bytes > kMaxListBytes && list.records_size() > 0) {
            cut = true;
            break;
          }
          *list.add_records() = std::move(r);
        }
        if (cut || (list.records_size() > 0 && records->size() >= OutboxStore::ListLimit(request->limit()))) {
          list.set_next_after_command_id(list.records().rbegin()->command().command_id());
        }
        out = std::move(list);
      }
      return FinishUnary(context, std::move(out), response);
    });
  }

  grpc::ServerWriteReactor<v1::WatchEvent>* Watch(grpc::CallbackServerContext* context,
                                                  const v1::WatchRequest* /*request*/) override {
    if (absl::Status allowed = Authorize(*context); !allowed.ok()) {
      return new RefusedWatch(ToGrpcStatus(allowed, context));
    }
    return new WatchReactor(feed_);
  }

  grpc::ServerUnaryReactor* Stats(grpc::CallbackServerContext* context,
                                  const v1::StatsRequest* /*request*/,
                                  v1::StatsResponse* response) override {
    return Authorized(context, response, [&]() -> grpc::ServerUnaryReactor* {
      absl::StatusOr<v1::StatsResponse> out;
      auto oldest = store_.OldestWaitingAgeMs();
      if (!oldest.ok()) {
        out = oldest.status();
      } else {
        v1::StatsResponse stats;
        auto counts = store_.CountsByState();
        for (int s = 1; s < v1::OutboxState_ARRAYSIZE; ++s) {
          v1::StateCount* count = stats.add_counts();
          count->set_state(static_cast<v1::OutboxState>(s));
          count->set_count(counts[s]);
        }
        stats.set_oldest_queued_age_ms(*oldest);
        stats.set_credential_epoch(credential_.session().epoch);
        stats.set_revoked(credential_.revoked());
        out = std::move(stats);
      }
      return FinishUnary(context, std::move(out), response);
    });
  }

  grpc::ServerUnaryReactor* Requeue(grpc::CallbackServerContext* context,
                                    const v1::RequeueRequest* request,
                                    OutboxRecord* response) override {
    return Authorized(context, response, [&]() -> grpc::ServerUnaryReactor* {
      auto result = outbox_.Requeue(request->command_id());
      if (result.ok()) kick_();
      return FinishUnary(context, std::move(result), response);
    });
  }

  grpc::ServerUnaryReactor* Drop(grpc::CallbackServerContext* context,
                                 const v1::DropRequest* request,
                                 OutboxRecord* response) override {
    return Authorized(context, response, [&]() -> grpc::ServerUnaryReactor* {
      return FinishUnary(context, outbox_.Drop(request->command_id(), request->why()), response);
    });
  }

  grpc::ServerUnaryReactor* SetCredential(grpc::CallbackServerContext* context,
                                          const v1::SetCredentialRequest* request,
                                          v1::SetCredentialResponse* response) override {
    return Authorized(context, response, [&]() -> grpc::ServerUnaryReactor* {
      absl::Status set = credential_.Set(request->epoch(), request->revoked());
      absl::StatusOr<v1::SetCredentialResponse> out;
      if (set.ok()) {
        v1::SetCredentialResponse r;
        r.set_epoch(credential_.session().epoch);
        r.set_revoked(credential_.revoked());
        out = r;
        kick_();
      } else {
        out = set;
      }
      return FinishUnary(context, std::move(out), response);
    });
  }

 private:
  // The agent serves one tenant. A caller authenticated by a client certificate must be
  // of that tenant; a plaintext caller (local development) is taken at its word.
  absl::Status Authorize(const grpc::CallbackServerContext& context) const {
    absl::StatusOr<std::string> tenant = CallerTenant(context);
    if (!tenant.ok()) return tenant.status();
    if (!tenant->empty() && *tenant != tenant_) {
      return Error(
          absl::StatusCode::kPermissionDenied, "WRONG_TENANT",
          absl::StrCat("this agent serves tenant \"", tenant_, "\", not \"", *tenant, "\""));
    }
    return absl::OkStatus();
  }

  template <typename Response, typename Handler>
  grpc::ServerUnaryReactor* Authorized(grpc::CallbackServerContext* context, Response* response,
                                       Handler handler) {
    if (absl::Status allowed = Authorize(*context); !allowed.ok()) {
      LogWarn("caller refused",
              {{"reason", std::string(allowed.message())}, {"peer", context->peer()}});
      return FinishUnary<Response>(context, allowed, response);
    }
    return handler();
  }

  const std::string tenant_;
  WorkPool& pool_;
  Outbox& outbox_;
  OutboxStore& store_;
  CredentialState& credential_;
  StateFeed& feed_;
  std::atomic<bool>& draining_;
  std::function<void()> kick_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<AgentServer>> AgentServer::Start(AgentServerOptions options,
                                                               Clock& clock, Random& random) {
  if (options.data_dir.empty()) return absl::InvalidArgumentError("data_dir: required");
  EONCE_RETURN_IF_ERROR(ValidateName(options.tenant, options.limits.max_tenant_bytes, "tenant"));
  EONCE_RETURN_IF_ERROR(ValidateTlsFiles(options.tls));
  if (!options.actor.empty()) {
    EONCE_RETURN_IF_ERROR(ValidateName(options.actor, options.limits.max_actor_bytes, "actor"));
  }
  const RetryOptions& retry = options.replay.retry;
  EONCE_RETURN_IF_ERROR(ValidateReplayerOptions(options.replay));
  if (options.replay.max_in_flight < 1 || options.replay.max_in_flight > 4096) {
    return absl::InvalidArgumentError("max_in_flight: must be in [1, 4096]");
  }
  std::unique_ptr<AgentServer> s(new AgentServer());
  s->options_ = options;
  s->clock_ = &clock;
  s->filters_ = std::make_unique<OutboxStore::Filters>(clock);
  StoreOptions store_options;
  store_options.min_free_bytes = options.min_free_bytes;
  EONCE_ASSIGN_OR_RETURN(
      s->rocks_,
      RocksStore::Open(options.data_dir, OutboxStore::ColumnFamilies(*s->filters_), store_options));
  s->store_ = std::make_unique<OutboxStore>(*s->rocks_, clock, options.store);
  EONCE_ASSIGN_OR_RETURN(int recovered, s->store_->RecoverAfterRestart());
  if (recovered > 0) {
    LogInfo("records in flight at the last stop are now unknown and will be reconciled",
            {{"count", absl::StrCat(recovered)}});
  }
  EONCE_ASSIGN_OR_RETURN(s->credential_, CredentialState::Load(*s->store_, options.tenant,
                                                               options.actor,
                                                               options.initial_epoch));
  EONCE_RETURN_IF_ERROR(s->credential_->MaybeReloadFile(options.credential_file));

  SidecarClient* client = options.client;
  if (client == nullptr) {
    EONCE_ASSIGN_OR_RETURN(
        auto grpc_client,
        GrpcSidecarClient::Create(options.routes, options.default_sidecar, options.tls, clock));
    // The retention contract: a max age past the sidecar's retention would replay
    // records that the sidecar no longer remembers.
    for (auto& [route, retention] : grpc_client->FetchRetentions(options.startup_info_wait_ms)) {
      if (retry.max_age_ms >= retention - retry.retention_margin_ms) {
        return absl::InvalidArgumentError(absl::StrCat(
            "max_age_ms: ", retry.max_age_ms, " must be shorter than the retention of sidecar ",
            route, " (", retention, " ms) minus the safety margin (", retry.retention_margin_ms,
            " ms)"));
      }
    }
    s->owned_client_ = std::move(grpc_client);
    client = s->owned_client_.get();
  }
  s->outbox_ = std::make_unique<Outbox>(*s->store_, *s->credential_, clock, random, options.limits,
                                        &s->feed_);
  s->replayer_ = std::make_unique<Replayer>(*s->store_, *client, *s->credential_, clock, random,
                                            options.replay, &s->feed_);
  AgentServer* raw = s.get();
  s->pool_ = std::make_unique<WorkPool>(64, 4096);
  s->service_ = std::make_unique<AgentServiceImpl>(
      *s->outbox_, *s->store_, *s->credential_, s->feed_, s->draining_, [raw] { raw->Kick(); },
      *s->pool_, options.tenant);
  EnableStandardServices();
  grpc::ServerBuilder builder;
  EONCE_RETURN_IF_ERROR(AddListener(builder, options.listen_address, options.tls, &s->port_));
  ApplyServerLimits(builder, static_cast<int>(options.limits.max_request_bytes) + (1 << 20), 1024);
  builder.RegisterService(s->service_.get());
  EONCE_ASSIGN_OR_RETURN(s->server_, BuildAndServe(builder, options.listen_address));
  s->ready_ = true;
  if (!options.health_address.empty()) {
    EONCE_ASSIGN_OR_RETURN(s->health_port_, HealthPort::Start(options.health_address));
  }
  if (!options.metrics_address.empty()) {
    EONCE_ASSIGN_OR_RETURN(s->metrics_, MetricsEndpoint::Start(options.metrics_address,
                                                               [raw] { return raw->Collect(); }));
  }
  s->loop_ = std::thread([raw] { raw->Loop(); });
  return s;
}

std::vector<prometheus::MetricFamily> AgentServer::Collect() {
  std::vector<prometheus::MetricFamily> out;
  auto counts = store_->CountsByState();
  std::vector<std::pair<Labels, double>> by_state;
  for (int s = 1; s < v1::OutboxState_ARRAYSIZE; ++s) {
    std::string name = v1::OutboxState_Name(static_cast<v1::OutboxState>(s));
    for (auto& c : name) c = static_cast<char>(std::tolower(c));
    by_state.push_back({{{"state", name}}, static_cast<double>(counts[s])});
  }
  out.push_back(GaugeFamily("eonce_agent_outbox_records", "Outbox records by state.", by_state));
  auto oldest = store_->OldestWaitingAgeMs();
  out.push_back(GaugeFamily("eonce_agent_oldest_waiting_age_seconds",
                            "Age of the oldest record not yet final.",
                            {{{}, oldest.ok() ? *oldest / 1000.0 : 0.0}}));
  const ReplayStats& st = replayer_->stats();
  auto n = [](const std::atomic<int64_t>& v) { return static_cast<double>(v.load()); };
  out.push_back(CounterFamily("eonce_agent_attempts_total", "Attempts started.", {{{}, n(st.attempts)}}));
  out.push_back(CounterFamily("eonce_agent_reconciles_total", "Reconcile calls before resending.",
                              {{{}, n(st.reconciles)}}));
  out.push_back(CounterFamily("eonce_agent_retries_total", "Failed attempts by class.",
                              {{{{"class", "retryable"}}, n(st.retries_retryable)},
                               {{{"class", "unknown"}}, n(st.retries_unknown)},
                               {{{"class", "unclassified"}}, n(st.retries_unclassified)}}));
  out.push_back(CounterFamily("eonce_agent_acked_total", "Commands acked.", {{{}, n(st.acked)}}));
  out.push_back(CounterFamily("eonce_agent_dead_letters_total", "Records dead-lettered.",
                              {{{}, n(st.dead_lettered)}}));
  out.push_back(CounterFamily("eonce_agent_parked_answers_total",
                              "Answers saying the outcome is parked at the sidecar.", {{{}, n(st.parked)}}));
  out.push_back(CounterFamily("eonce_agent_stale_answers_refused_total",
                              "Answers refused by their credential fence.",
                              {{{}, n(st.stale_responses_refused)}}));
  out.push_back(CounterFamily("eonce_agent_stale_claims_refused_total",
                              "Writes refused because the claim was taken over.",
                              {{{}, n(st.stale_claims_refused)}}));
  out.push_back(CounterFamily("eonce_agent_compaction_dropped_total",
                              "Final records dropped after the forensic retention.",
                              {{{}, static_cast<double>(filters_->stats.dropped.load())}}));
  out.push_back(GaugeFamily("eonce_agent_store_size_bytes", "RocksDB live SST and memtable bytes.",
                            {{{}, static_cast<double>(rocks_->ApproximateBytes())}}));
  out.push_back(GaugeFamily("eonce_agent_max_age_seconds",
                            "The age at which a record stops being retried; kept below the "
                            "sidecars' retention.",
                            {{{}, options_.replay.retry.max_age_ms / 1000.0}}));
  out.push_back(GaugeFamily("eonce_agent_credential_epoch", "The credential epoch replay runs under.",
                            {{{}, static_cast<double>(credential_->session().epoch)}}));
  out.push_back(GaugeFamily("eonce_agent_ready", "1 when serving, 0 when not ready.",
                            {{{}, ready_.load() ? 1.0 : 0.0}}));
  out.push_back(GaugeFamily("eonce_agent_replay_active", "1 while replay runs; 0 when revoked or paused.",
                            {{{}, credential_->active() ? 1.0 : 0.0}}));
  return out;
}

void AgentServer::Kick() {
  absl::MutexLock lock(&loop_mu_);
  kicked_ = true;
}

void AgentServer::Loop() {
  int64_t last_credential_check = 0;
  while (true) {
    {
      absl::MutexLock lock(&loop_mu_);
      auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(loop_mu_) { return kicked_ || stop_; };
      loop_mu_.AwaitWithTimeout(absl::Condition(&woken), absl::Milliseconds(options_.idle_pump_ms));
      if (stop_) return;
      kicked_ = false;
    }
    int64_t now = clock_->NowMs();
    if (now - last_credential_check >= 1000) {
      last_credential_check = now;
      // Readiness follows the store: a full disk or an I/O error turns it off until a
      // restart (the store's breaker).
      bool ok = rocks_->ProbeWrite().ok() && !draining_.load();
      if (ok != ready_.exchange(ok)) {
        if (server_ != nullptr) SetServing(*server_, health_port_.get(), ok);
        if (!ok) LogError("outbox store not writable; not ready");
      }
      if (absl::Status reloaded = credential_->MaybeReloadFile(options_.credential_file);
          !reloaded.ok()) {
        LogError("credential file unreadable", {{"error", std::string(reloaded.message())}});
      }
    }
    // Keep pumping while there is work and room.
    while (replayer_->Pump() > 0) {
    }
  }
}

absl::Status AgentServer::Shutdown(int64_t drain_ms) {
  // The loop touches the server's health status: stop it before the server goes.
  if (loop_.joinable()) {
    {
      absl::MutexLock lock(&loop_mu_);
      stop_ = true;
    }
    loop_.join();
  }
  if (server_ != nullptr) draining_ = true;
  StopServing(server_, health_port_, drain_ms);
  pool_.reset();
  metrics_.reset();
  // Attempts in flight finish (their calls have deadlines); a record whose answer does
  // not arrive in time stays SENDING and is reconciled after the restart.
  // Every attempt has a deadline, so waiting that long always suffices.
  int64_t wait_ms = std::max(drain_ms, options_.replay.submit_timeout_ms + 1000);
  const int64_t give_up_ms = clock_->NowMs() + wait_ms;
  while (replayer_ != nullptr && replayer_->in_flight() > 0 && clock_->NowMs() < give_up_ms) {
    clock_->SleepMs(5);
  }
  if (replayer_ != nullptr && replayer_->in_flight() > 0) {
    // The callbacks still reference the replayer and store: leave them alive.
    LogWarn("attempts still in flight at shutdown; they will be reconciled after restart");
    owned_client_.release();
    replayer_.release();
    store_.release();
    rocks_.release();
    return absl::OkStatus();
  }
  return rocks_ != nullptr ? rocks_->Close() : absl::OkStatus();
}

AgentServer::~AgentServer() { Shutdown(0).IgnoreError(); }

}  // namespace eonce
