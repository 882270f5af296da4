#include "common/base/flags.h"
#include "services/inbox/service_host.h"

#include <chrono>
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/base/chance_faults.h"
#include "common/base/log.h"
#include "common/base/random.h"
#include "common/rpc/server.h"
#include "common/rpc/server_flags.h"
#include "common/rpc/server_security.h"
#include "common/base/status.h"
#include "grpcpp/server_builder.h"
#include "services/inbox/caller_gate.h"

ABSL_FLAG(std::string, listen, "",
          "address to serve on, for eonce components (the sidecar, a relay) and operators "
          "only: host:port or unix:/path (the pod's own socket). An address other hosts can "
          "reach needs mutual TLS (--tls_cert, --tls_key, --tls_ca) or --insecure. With the "
          "sidecar in this process (ledger --sidecar_listen) it is a unix socket or mutual "
          "TLS, never plaintext TCP. Empty: unix:<data_dir>/business.sock with the sidecar in "
          "this process, else 127.0.0.1:7101 (ledger) or 127.0.0.1:7201 (case)");
ABSL_FLAG(std::string, sidecar_socket, "",
          "also serve, in plaintext, on this unix socket (unix:/path in the pod's shared "
          "volume) for the pod's own sidecar, beside --listen (which then needs mutual TLS "
          "on a TCP port); empty: none");
ABSL_FLAG(std::string, data_dir, "", "RocksDB data directory (required)");
ABSL_FLAG(bool, legacy, false, "legacy mode: no inbox and no Outcome service; every call applies");
ABSL_FLAG(int64_t, drain_ms, 5000, "how long in-flight calls may finish on SIGTERM");
ABSL_FLAG(int64_t, inbox_retention_ms, eonce::Inbox::kDefaultEntryRetentionMs,
          "how long an inbox entry answers repeats and QueryOutcome (31 days); at least the "
          "sidecar's --forensic_retention_ms");
ABSL_FLAG(double, lose_answer_ratio, 0.0,
          "chaos: the share of applied calls whose answer is lost (UNAVAILABLE after the "
          "effect is durable); for demos and fault tests");
ABSL_FLAG(uint64_t, fault_seed, 1, "chaos: the seed of lose_answer_ratio's draws");
ABSL_FLAG(std::string, metrics_listen, "",
          "Prometheus endpoint, host:port (e.g. 0.0.0.0:9101), plaintext on any address (it "
          "reveals no identity-bearing data); empty: no endpoint");

namespace eonce {

absl::StatusOr<std::unique_ptr<ServiceHost>> ServiceHost::Start(
    const ServiceHostOptions& options, Clock& clock, std::vector<ColumnFamilySpec> families,
    const Setup& setup) {
  if (options.data_dir.empty()) return absl::InvalidArgumentError("data_dir: required");
  EONCE_RETURN_IF_ERROR(ValidateTlsFiles(options.tls));
  const ListenRules rules{options.insecure, /*plaintext_tcp=*/!options.one_door};
  EONCE_ASSIGN_OR_RETURN(ListenerTrust trust, DecideListenerTrust("listen", options.listen_address,
                                                                  options.tls, rules));
  std::unique_ptr<ServiceHost> host(new ServiceHost());
  host->insecure_ = options.insecure;
  if (options.inbox_retention_ms <= 0) {
    return absl::InvalidArgumentError("inbox_retention_ms: must be positive");
  }
  for (auto& family : Inbox::ColumnFamilies(clock)) families.push_back(family);
  StoreOptions store_options = Inbox::StoreOptionsFor();
  store_options.min_free_bytes = options.min_free_bytes;
  EONCE_ASSIGN_OR_RETURN(host->store_, RocksStore::Open(options.data_dir, families, store_options));
  host->inbox_ = std::make_unique<Inbox>(*host->store_, clock, options.legacy_mode, options.faults,
                                         options.inbox_retention_ms);
  EONCE_ASSIGN_OR_RETURN(HostedService hosted, setup(*host->store_, *host->inbox_));
  host->service_ = std::move(hosted.service);
  host->collect_ = std::move(hosted.collect);
  if (!hosted.handlers.empty()) {
    host->forward_handlers_ =
        std::make_unique<InboxUpstream>(*host->inbox_, std::move(hosted.handlers), clock);
    host->forwards_service_ = std::make_unique<ForwardsServiceImpl>(*host->forward_handlers_);
  }
  host->effects_service_ = std::make_unique<EffectsServiceImpl>(*host->inbox_);
  host->follow_ups_service_ = std::make_unique<FollowUpsServiceImpl>(*host->inbox_);
  host->slot_data_service_ = std::make_unique<SlotDataServiceImpl>(*host->inbox_);

  EnableStandardServices();
  grpc::ServerBuilder builder;
  // Every listener checks its callers before any service (caller_gate.h).
  EONCE_RETURN_IF_ERROR(AddListener(builder, options.listen_address, options.tls, &host->port_,
                                    BusinessServerCredentials(options.tls)));
  if (!options.sidecar_socket.empty()) {
    EONCE_RETURN_IF_ERROR(
        AddLocalSocket(builder, options.sidecar_socket, BusinessServerCredentials(TlsFiles())));
  }
  ApplyServerLimits(builder, 4 << 20, 1024);
  builder.RegisterService(host->service_.get());
  builder.RegisterService(host->effects_service_.get());
  builder.RegisterService(host->follow_ups_service_.get());
  builder.RegisterService(host->slot_data_service_.get());
  if (host->forwards_service_ != nullptr) builder.RegisterService(host->forwards_service_.get());
  if (!options.legacy_mode) {
    host->outcome_service_ = std::make_unique<OutcomeServiceImpl>(*host->inbox_);
    builder.RegisterService(host->outcome_service_.get());
  }
  EONCE_ASSIGN_OR_RETURN(host->server_,
                         BuildAndServe(builder, options.listen_address, options.sidecar_socket));
  LogListenerTrust(options.metrics_name, options.listen_address, trust, rules);
  host->ready_ = true;
  host->metrics_name_ = options.metrics_name;
  if (!options.health_address.empty()) {
    EONCE_ASSIGN_OR_RETURN(host->health_port_, HealthPort::Start(options.health_address));
  }
  if (!options.metrics_address.empty()) {
    ServiceHost* raw = host.get();
    EONCE_ASSIGN_OR_RETURN(host->metrics_, MetricsEndpoint::Start(options.metrics_address,
                                                                 [raw] { return raw->Collect(); }));
  }
  host->probe_ = std::thread([raw = host.get(), every = options.health_probe_ms] {
    raw->ProbeLoop(every);
  });
  return host;
}

void ServiceHost::ProbeLoop(int64_t every_ms) {
  while (!stop_probe_.WaitForNotificationWithTimeout(absl::Milliseconds(std::max<int64_t>(20, every_ms)))) {
    // Readiness follows the store: after a failed write it stays off until a restart.
    bool ok = store_->ProbeWrite().ok();
    if (ok != ready_.exchange(ok)) {
      SetServing(*server_, health_port_.get(), ok);
      if (!ok) LogError("store not writable; not ready", {{"service", metrics_name_}});
    }
  }
}

std::vector<prometheus::MetricFamily> ServiceHost::Collect() const {
  std::string p = "eonce_" + metrics_name_ + "_";
  std::vector<prometheus::MetricFamily> out;
  out.push_back(InsecureGauge(insecure_));
  out.push_back(CounterFamily(p + "effects_applied_total", "Calls that applied an effect.",
                              {{{}, static_cast<double>(inbox_->applied())}}));
  out.push_back(CounterFamily(p + "rejections_total", "Calls answered with a business rejection.",
                              {{{}, static_cast<double>(inbox_->rejected())}}));
  out.push_back(CounterFamily(p + "inbox_repeats_total",
                              "Repeated command ids answered from the inbox, with no effect.",
                              {{{}, static_cast<double>(inbox_->repeats_answered())}}));
  out.push_back(GaugeFamily(p + "follow_ups_pending",
                            "Follow-up commands written with an effect and not yet taken by a "
                            "relay (credits in flight, for the ledger).",
                            {{{}, static_cast<double>(inbox_->follow_ups_pending())}}));
  out.push_back(GaugeFamily(p + "store_size_bytes", "RocksDB live SST and memtable bytes.",
                            {{{}, static_cast<double>(store_->ApproximateBytes())}}));
  out.push_back(CounterFamily(p + "syncs_on_caller_total",
                              "Group commits a call's handler ran on its own thread, the "
                              "store being quiet (under load the committer thread runs them).",
                              {{{}, static_cast<double>(store_->led_syncs())}}));
  out.push_back(GaugeFamily(p + "ready", "1 when serving, 0 when not ready.",
                            {{{}, ready_.load() ? 1.0 : 0.0}}));
  if (collect_) {
    for (prometheus::MetricFamily& family : collect_(p)) out.push_back(std::move(family));
  }
  return out;
}

absl::Status ServiceHost::Shutdown(int64_t drain_ms) {
  if (probe_.joinable()) {
    stop_probe_.Notify();
    probe_.join();
  }
  StopServing(server_, health_port_, drain_ms);
  metrics_.reset();
  return store_ != nullptr ? store_->Close() : absl::OkStatus();
}

ServiceHost::~ServiceHost() { Shutdown(0).IgnoreError(); }

int RunServiceMain(int argc, char** argv, const char* name, const char* default_listen,
                   std::vector<ColumnFamilySpec> families, const ServiceHost::Setup& setup,
                   const CompanionSpec& companion) {
  BlockShutdownSignals();
  const std::string usage = absl::StrCat(name, " --data_dir=DIR [--listen=ADDR] [--legacy]");
  ParseFlags(argc, argv, {usage.c_str(), /*from_environment=*/true});
  ServiceHostOptions options;
  options.listen_address = absl::GetFlag(FLAGS_listen);
  // With a companion, callers come through it: the business keeps one door of its own.
  options.one_door = companion.wanted && companion.wanted();
  options.sidecar_socket = absl::GetFlag(FLAGS_sidecar_socket);
  options.data_dir = absl::GetFlag(FLAGS_data_dir);
  options.legacy_mode = absl::GetFlag(FLAGS_legacy);
  options.inbox_retention_ms = absl::GetFlag(FLAGS_inbox_retention_ms);
  options.metrics_address = absl::GetFlag(FLAGS_metrics_listen);
  ServerFlags shared = ServerFlagsFromFlags();
  options.tls = shared.tls;
  options.health_address = shared.health_address;
  options.min_free_bytes = shared.min_free_bytes;
  options.insecure = shared.insecure;
  options.metrics_name = absl::StrReplaceAll(name, {{"_service", ""}});
  if (options.data_dir.empty()) {
    std::cerr << name << ": setting data_dir is required\n";
    return 2;
  }
  if (options.listen_address.empty()) {
    options.listen_address = options.one_door ? absl::StrCat("unix:", options.data_dir, "/",
                                                             kBusinessSocketName)
                                              : default_listen;
    if (UnixSocketPath(options.listen_address).size() > kMaxUnixSocketPathBytes) {
      std::cerr << name << ": the business socket " << options.listen_address << " is longer "
                << "than a unix socket path may be (" << kMaxUnixSocketPathBytes
                << " bytes); set --listen=unix:/shorter/path\n";
      return 2;
    }
  }
  double lose = absl::GetFlag(FLAGS_lose_answer_ratio);
  if (lose < 0 || lose > 1) {
    std::cerr << name << ": setting lose_answer_ratio must be in [0, 1]\n";
    return 2;
  }
  SeededRandom fault_random(absl::GetFlag(FLAGS_fault_seed));
  ChanceFaults faults(fault_random, absl::UnavailableError("answer lost (chaos)"));
  if (lose > 0) {
    faults.Arm(FaultPoint::kAfterApplyBeforeResponse, lose);
    options.faults = &faults;
  }
  auto host = ServiceHost::Start(options, RealClock::Get(), std::move(families), setup);
  if (!host.ok()) {
    std::cerr << name << ": " << host.status().message() << "\n";
    return host.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  std::unique_ptr<Companion> beside;
  if (options.one_door) {
    auto started = companion.start(**host);
    if (!started.ok()) {
      std::cerr << name << ": " << started.status().message() << "\n";
      return started.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
    }
    beside = std::move(*started);
  }
  // The address callers use: the companion's when there is one (the business's own port
  // is then for eonce components and operators). Logged first, so that whoever reads the
  // announcement finds the business port in the log.
  if (beside != nullptr) {
    LogInfo("business port",
            {{"service", name}, {"listen", BoundAddress(options.listen_address, (*host)->port())}});
    AnnounceListening(name, beside->listen_address(), beside->port());
  } else {
    AnnounceListening(name, options.listen_address, (*host)->port());
  }
  LogInfo("started", {{"service", name}, {"legacy", options.legacy_mode ? "true" : "false"}});
  WaitForShutdownSignal();
  ExitOnSecondSignal();
  LogInfo("draining", {{"service", name}});
  if (beside != nullptr) {
    if (absl::Status stopped = beside->Shutdown(absl::GetFlag(FLAGS_drain_ms)); !stopped.ok()) {
      LogError("companion close failed", {{"error", std::string(stopped.message())}});
    }
  }
  absl::Status closed = (*host)->Shutdown(absl::GetFlag(FLAGS_drain_ms));
  if (!closed.ok()) {
    LogError("close failed", {{"error", std::string(closed.message())}});
    return 1;
  }
  return 0;
}

}  // namespace eonce
