#include "outbox_agent/doors/agent_server.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/log.h"
#include "common/rpc/server.h"
#include "common/rpc/server_security.h"
#include "common/base/status.h"
#include "common/rpc/tls.h"
#include "grpcpp/server_builder.h"
#include "outbox_agent/core/idle_wait.h"
#include "outbox_agent/doors/agent_service.h"
#include "outbox_agent/transport/grpc_sidecar_client.h"

namespace eonce {

absl::StatusOr<std::unique_ptr<AgentServer>> AgentServer::Start(AgentServerOptions options,
                                                               Clock& clock, Random& random) {
  if (options.data_dir.empty()) return absl::InvalidArgumentError("data_dir: required");
  EONCE_RETURN_IF_ERROR(ValidateName(options.tenant, options.limits.max_tenant_bytes, "tenant"));
  EONCE_RETURN_IF_ERROR(ValidateTlsFiles(options.tls));
  const ListenRules rules{options.insecure};
  EONCE_ASSIGN_OR_RETURN(ListenerTrust trust, DecideListenerTrust("listen", options.listen_address,
                                                                  options.tls, rules));
  if (!options.actor.empty()) {
    EONCE_RETURN_IF_ERROR(ValidateName(options.actor, options.limits.max_actor_bytes, "actor"));
  }
  const RetryOptions& retry = options.replay.retry;
  EONCE_RETURN_IF_ERROR(ValidateReplayerOptions(options.replay));
  EONCE_RETURN_IF_ERROR(
      ValidateIdleWait(IdleWaitOptions{options.idle_pump_ms, options.max_idle_wait_ms}));
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

  {
    EONCE_ASSIGN_OR_RETURN(
        auto grpc_client,
        GrpcSidecarClient::Create(options.routes, options.default_sidecar, options.tls, clock));
    grpc_client->set_batch_submits(options.batch_submits);
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
    s->client_ = std::move(grpc_client);
  }
  AgentServer* raw = s.get();
  s->replayer_ = std::make_unique<Replayer>(*s->store_, *s->client_, *s->credential_, clock, random,
                                            options.replay, &s->feed_, /*faults=*/nullptr,
                                            [raw] { raw->Kick(); });
  // The replayer tells the outbox which new lane heads it sends at once: their mark that
  // they may have been sent rides on the Enqueue's sync, not on a sync of their claim.
  s->outbox_ = std::make_unique<Outbox>(*s->store_, *s->credential_, clock, random, options.limits,
                                        &s->feed_, /*faults=*/nullptr, s->replayer_.get());
  s->service_ = NewAgentService(*s->outbox_, *s->store_, *s->credential_, s->feed_,
                                s->draining_, [raw] { raw->Kick(); }, options.tenant);
  EnableStandardServices();
  grpc::ServerBuilder builder;
  EONCE_RETURN_IF_ERROR(AddListener(builder, options.listen_address, options.tls, &s->port_));
  ApplyServerLimits(builder, static_cast<int>(options.limits.max_request_bytes) + (1 << 20), 1024);
  builder.RegisterService(s->service_.get());
  EONCE_ASSIGN_OR_RETURN(s->server_, BuildAndServe(builder, options.listen_address));
  LogListenerTrust("agent", options.listen_address, trust, rules);
  s->ready_ = true;
  if (!options.health_address.empty()) {
    EONCE_ASSIGN_OR_RETURN(s->health_port_, HealthPort::Start(options.health_address));
  }
  if (!options.metrics_address.empty()) {
    EONCE_ASSIGN_OR_RETURN(s->metrics_, MetricsEndpoint::Start(options.metrics_address,
                                                               [raw] { return raw->Collect(); }));
  }
  s->loop_ = std::thread([raw] { raw->Loop(); });
  if (!options.relay_from.empty()) {
    // The business in the pod listens on its own unix socket, without TLS (as the
    // sidecar reaches it).
    const bool local_socket = absl::StartsWith(options.relay_from, "unix:");
    s->relay_source_ = NewGrpcFollowUpSource(options.relay_from, options.tenant,
                                             local_socket ? TlsFiles() : options.tls, clock);
    s->relay_ = std::make_unique<FollowUpRelay>(*s->relay_source_, *s->outbox_);
    s->relay_loop_ = std::thread([raw] { raw->RelayLoop(); });
  }
  return s;
}

std::vector<prometheus::MetricFamily> AgentServer::Collect() {
  std::vector<prometheus::MetricFamily> out;
  out.push_back(InsecureGauge(options_.insecure));
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
  out.push_back(CounterFamily("eonce_agent_follow_ups_relayed_total",
                              "Follow-up commands taken from the business's outbox (--relay_from).",
                              {{{}, relay_ != nullptr ? static_cast<double>(relay_->relayed()) : 0.0}}));
  out.push_back(CounterFamily(
      "eonce_agent_trace_context_dropped_total",
      "Malformed W3C trace context dropped from enqueued commands (never refused), by header.",
      {{{{"header", "traceparent"}}, static_cast<double>(outbox_->traceparents_dropped())},
       {{{"header", "tracestate"}}, static_cast<double>(outbox_->tracestates_dropped())}}));
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
  if (replayer_ != nullptr && !replayer_->CanStart()) {
    kicks_skipped_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  kicks_sent_.fetch_add(1, std::memory_order_relaxed);
  absl::MutexLock lock(&loop_mu_);
  kicked_ = true;
}

bool AgentServer::stopping() {
  absl::MutexLock lock(&loop_mu_);
  return stop_;
}

void AgentServer::Loop() {
  const IdleWaitOptions idle{options_.idle_pump_ms, options_.max_idle_wait_ms};
  int64_t last_credential_check = 0;
  int64_t wait_ms = 0;
  while (true) {
    {
      absl::MutexLock lock(&loop_mu_);
      auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(loop_mu_) { return kicked_ || stop_; };
      loop_mu_.AwaitWithTimeout(absl::Condition(&woken), absl::Milliseconds(wait_ms));
      if (stop_) return;
      kicked_ = false;
    }
    int64_t now = clock_->NowMs();
    if (PeriodicWorkDue(now, last_credential_check, options_.probe_every_ms)) {
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
    // Keep pumping while there is work and room, but not past the periodic work or a stop:
    // under a steady load every pass starts something, and a revoked credential file, a
    // full disk or a shutdown must still be seen.
    bool periodic_due = false;
    while (replayer_->Pump() > 0) {
      periodic_due =
          PeriodicWorkDue(clock_->NowMs(), last_credential_check, options_.probe_every_ms);
      if (periodic_due || stopping()) break;
    }
    wait_ms = periodic_due ? 0
                           : IdleWaitMs(clock_->NowMs(), store_->NextDueMs(),
                                        last_credential_check + options_.probe_every_ms, idle);
  }
}

void AgentServer::RelayLoop() {
  int64_t wait_ms = options_.relay_every_ms;
  int64_t last_error_log_ms = 0;
  while (true) {
    {
      absl::MutexLock lock(&loop_mu_);
      auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(loop_mu_) { return stop_; };
      if (loop_mu_.AwaitWithTimeout(absl::Condition(&stopping), absl::Milliseconds(wait_ms))) {
        return;
      }
    }
    absl::StatusOr<int> relayed = relay_->RelayOnce();
    if (relayed.ok()) {
      if (*relayed > 0) Kick();
      // A full page: more may wait, so go on at once.
      wait_ms = *relayed == FollowUpRelay::kPageSize ? 0 : options_.relay_every_ms;
      continue;
    }
    // The business is down or refusing: back off (to 2 s), and log at most every 10 s.
    wait_ms = std::min<int64_t>(2'000, std::max<int64_t>(options_.relay_every_ms, wait_ms * 2));
    if (clock_->NowMs() - last_error_log_ms >= 10'000) {
      last_error_log_ms = clock_->NowMs();
      LogWarn("follow-up relay round failed",
              {{"from", options_.relay_from}, {"error", std::string(relayed.status().message())}});
    }
  }
}

absl::Status AgentServer::Shutdown(int64_t drain_ms) {
  // The loops touch the server's health status and the outbox: stop them first.
  {
    absl::MutexLock lock(&loop_mu_);
    stop_ = true;
  }
  if (loop_.joinable()) loop_.join();
  if (relay_loop_.joinable()) relay_loop_.join();
  if (server_ != nullptr) draining_ = true;
  StopServing(server_, health_port_, drain_ms);
  metrics_.reset();
  // Attempts in flight get the drain time to finish. Then the agent's own client cancels
  // the rest and waits for their callbacks; a record whose answer did not arrive stays
  // SENDING (or UNKNOWN) and is reconciled after the restart.
  auto wait_for_attempts = [this](int64_t wait_ms) {
    const int64_t give_up_ms = clock_->NowMs() + wait_ms;
    while (replayer_ != nullptr && replayer_->in_flight() > 0 &&
           clock_->NowMs() < give_up_ms) {
      clock_->SleepMs(5);
    }
    return replayer_ == nullptr || replayer_->in_flight() == 0;
  };
  if (!wait_for_attempts(drain_ms)) {
    LogWarn("attempts still in flight at shutdown: cancelled; reconciled after restart");
  }
  // The client cancels what is left and returns once every call's callback has run, and
  // an attempt ends in its callback (its writes are not synced, so nothing of it waits
  // for a disk): after it, no attempt touches the replayer or the store.
  client_.reset();
  return rocks_ != nullptr ? rocks_->Close() : absl::OkStatus();
}

AgentServer::~AgentServer() { Shutdown(0).IgnoreError(); }

}  // namespace eonce
