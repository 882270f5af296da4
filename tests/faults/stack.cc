#include "tests/faults/stack.h"

#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/command/command.h"
#include "common/rpc/tls.h"
#include "eonce/ledger/v1/ledger.grpc.pb.h"
#include "eonce/v1/outcome.grpc.pb.h"
#include "eonce/v1/sidecar.grpc.pb.h"
#include "outbox_agent/store/states.h"
#include "tests/util/account_command.h"
#include "tests/util/ground_truth.h"

namespace eonce::testing {
namespace {

constexpr int kMaxMessageBytes = 4 << 20;

std::unique_ptr<grpc::ClientContext> Context(int64_t timeout_ms) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms));
  return context;
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::shared_ptr<grpc::Channel> Channel(const std::string& address) {
  return NewChannel(address, TlsFiles(), kMaxMessageBytes);
}

}  // namespace

const char* ComponentName(Component c) {
  switch (c) {
    case Component::kLedger:
      return "ledger";
    case Component::kSidecar:
      return "sidecar";
    case Component::kAgent:
      return "agent";
  }
  return "?";
}

absl::StatusOr<std::unique_ptr<FaultStack>> FaultStack::Start(const std::string& dir,
                                                              StackOptions options) {
  std::unique_ptr<FaultStack> s(new FaultStack());
  s->dir_ = dir;
  s->options_ = options;
  uint64_t seed = options.seed;
  const std::string stores = options.store_root.empty() ? dir : options.store_root;

  s->ledger_.name = "ledger";
  s->ledger_.binary = "services/ledger/ledger_service";
  s->ledger_.args = {"--data_dir=" + dir + "/ledger"};
  if (options.legacy_ledger) s->ledger_.args.push_back("--legacy");
  for (const auto& a : options.ledger_args) s->ledger_.args.push_back(a);
  auto ledger_address = s->StartBehindProxy(s->ledger_, s->to_ledger_, seed++);
  if (!ledger_address.ok()) return ledger_address.status();

  s->sidecar_.name = "sidecar";
  s->sidecar_.binary = "dedupe_sidecar/dedupe_sidecar";
  s->sidecar_.args = {"--data_dir=" + stores + "/sidecar", "--upstream=" + *ledger_address,
                      "--lease_ms=3000", "--forward_timeout_ms=1000",
                      "--outcome_query_timeout_ms=1000", "--drain_ms=500"};
  for (const auto& a : options.sidecar_args) s->sidecar_.args.push_back(a);
  auto sidecar_address = s->StartBehindProxy(s->sidecar_, s->to_sidecar_, seed++);
  if (!sidecar_address.ok()) return sidecar_address.status();

  s->agents_.resize(options.agents);
  s->to_agents_.resize(options.agents);
  for (int i = 0; i < options.agents; ++i) {
    Member& a = s->agents_[i];
    a.name = absl::StrCat("agent", i);
    a.binary = "outbox_agent/outbox_agent";
    a.args = {"--data_dir=" + stores + "/" + a.name,
              "--tenant=acme",
              "--sidecar=" + *sidecar_address,
              "--base_backoff_ms=20",
              "--max_backoff_ms=500",
              "--submit_timeout_ms=2000",
              "--claim_ttl_ms=5000",
              "--max_attempts=100000",
              "--drain_ms=500"};
    for (const auto& arg : options.agent_args) a.args.push_back(arg);
    auto agent_address = s->StartBehindProxy(a, s->to_agents_[i], seed++);
    if (!agent_address.ok()) return agent_address.status();
  }
  return s;
}

FaultStack::~FaultStack() {
  for (Member& a : agents_) {
    if (a.process != nullptr) a.process->Signal(SIGKILL, true);
  }
  for (Member* m : {&sidecar_, &ledger_}) {
    if (m->process != nullptr) m->process->Signal(SIGKILL, true);
  }
}

absl::StatusOr<std::string> FaultStack::StartBehindProxy(Member& m,
                                                         std::unique_ptr<FaultProxy>& proxy,
                                                         uint64_t seed) {
  if (absl::Status started = StartOnItsPort(m, dir_); !started.ok()) return started;
  if (!options_.proxies) return m.process->address();
  auto started = FaultProxy::Start(m.process->address(), seed);
  if (!started.ok()) return started.status();
  proxy = std::move(*started);
  return proxy->address();
}

absl::Status StartOnItsPort(PortedProcess& m, const std::string& dir) {
  std::vector<std::string> args = m.args;
  args.push_back("--listen=127.0.0.1:" + (m.port.empty() ? "0" : m.port));
  absl::Status last;
  for (int attempt = 0; attempt < 100; ++attempt) {
    auto p = Process::Start(m.binary, args, dir + "/" + m.name + ".log");
    if (p.ok()) {
      m.process = std::move(*p);
      if (m.port.empty()) {
        const std::string& address = m.process->address();
        m.port = address.substr(address.rfind(':') + 1);
      }
      return absl::OkStatus();
    }
    last = p.status();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return last;
}

FaultStack::Member& FaultStack::member(Component component, int agent) {
  switch (component) {
    case Component::kLedger:
      return ledger_;
    case Component::kSidecar:
      return sidecar_;
    case Component::kAgent:
      break;
  }
  return agents_.at(agent);
}

absl::Status FaultStack::KillAndRestart(Component component, int agent) {
  Member& m = member(component, agent);
  m.process->Signal(SIGKILL, /*wait=*/true);
  return StartOnItsPort(m, dir_);
}

Process& FaultStack::process(Component component, int agent) {
  return *member(component, agent).process;
}

std::string FaultStack::agent_address(int i) const {
  if (to_agents_.at(i) != nullptr) return to_agents_[i]->address();
  return agents_.at(i).process->address();
}

FaultProxy* FaultStack::proxy_to(Component component) {
  switch (component) {
    case Component::kLedger:
      return to_ledger_.get();
    case Component::kSidecar:
      return to_sidecar_.get();
    case Component::kAgent:
      return to_agents_.empty() ? nullptr : to_agents_[0].get();
  }
  return nullptr;
}

LoadClient::LoadClient(std::string agent_address, std::string account_prefix)
    : address_(std::move(agent_address)), account_prefix_(std::move(account_prefix)) {}

bool LoadClient::Enqueue(v1::Agent::Stub& stub, const v1::Command& command, int64_t give_up_ms) {
  int64_t deadline = NowMs() + give_up_ms;
  v1::EnqueueRequest request;
  *request.mutable_command() = command;
  while (NowMs() < deadline) {
    auto context = Context(2000);
    v1::EnqueueResponse response;
    grpc::Status s = stub.Enqueue(context.get(), request, &response);
    if (s.ok()) {
      absl::MutexLock lock(&mu_);
      acked_.insert(command.command_id());
      return true;
    }
    switch (s.error_code()) {
      case grpc::StatusCode::INVALID_ARGUMENT:
      case grpc::StatusCode::PERMISSION_DENIED:
      case grpc::StatusCode::FAILED_PRECONDITION:
      case grpc::StatusCode::ALREADY_EXISTS:
        return false;  // the same command will never be taken
      default:
        std::this_thread::sleep_for(std::chrono::milliseconds(30));
    }
  }
  return false;
}

int64_t LoadClient::Run(int accounts, int64_t initial, int transfers, int threads, uint64_t seed,
                        int64_t give_up_ms, const std::string& transfer_prefix) {
  std::atomic<int64_t> failed{0};
  auto channel = Channel(address_);
  auto run_threads = [&](auto body) {
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) workers.emplace_back(body, t);
    for (auto& w : workers) w.join();
  };
  run_threads([&](int t) {
    auto stub = v1::Agent::NewStub(channel);
    for (int i = t; i < accounts; i += threads) {
      ledger::v1::OpenAccountRequest open;
      open.set_id(absl::StrCat(account_prefix_, i));
      open.set_initial_balance(initial);
      if (!Enqueue(*stub,
                   AccountCommand(absl::StrCat("open-", i), "/eonce.ledger.v1.Ledger/OpenAccount",
                                  open, open.id()),
                   give_up_ms)) {
        failed++;
      }
    }
  });
  run_threads([&](int t) {
    auto stub = v1::Agent::NewStub(channel);
    std::mt19937_64 rng(seed * 1000 + t);
    for (int i = t; i < transfers; i += threads) {
      ledger::v1::TransferRequest transfer;
      int from = static_cast<int>(rng() % accounts);
      int to = (from + 1 + static_cast<int>(rng() % (accounts - 1))) % accounts;
      transfer.set_from(absl::StrCat(account_prefix_, from));
      transfer.set_to(absl::StrCat(account_prefix_, to));
      transfer.set_amount(1 + static_cast<int64_t>(rng() % (initial / 4)));
      if (!Enqueue(*stub,
                   AccountCommand(absl::StrCat(transfer_prefix, i),
                                  "/eonce.ledger.v1.Ledger/Transfer", transfer, transfer.from()),
                   give_up_ms)) {
        failed++;
      }
    }
  });
  return failed.load();
}

std::set<std::string> LoadClient::acked() const {
  absl::MutexLock lock(&mu_);
  return acked_;
}

void KeepLogs(const std::string& dir) {
  const char* outputs = std::getenv("TEST_UNDECLARED_OUTPUTS_DIR");
  if (outputs == nullptr) return;
  namespace fs = std::filesystem;
  std::error_code error;
  fs::path target = fs::path(outputs) / fs::path(dir).filename();
  fs::create_directories(target, error);
  for (const auto& entry : fs::directory_iterator(dir, error)) {
    if (entry.path().extension() == ".log") {
      fs::copy_file(entry.path(), target / entry.path().filename(),
                    fs::copy_options::overwrite_existing, error);
    }
  }
}

int ResolveParkedFromTheLedger(const std::string& sidecar_address,
                               const std::string& ledger_address) {
  auto admin = v1::SidecarAdmin::NewStub(Channel(sidecar_address));
  v1::ListParkedRequest list;
  list.set_limit(1000);
  v1::ListParkedResponse parked;
  auto context = Context(5000);
  context->AddMetadata(kTenantHeader, "acme");
  context->AddMetadata(kOperatorHeader, "kill-test");
  if (!admin->ListParked(context.get(), list, &parked).ok() || parked.records_size() == 0) {
    return 0;
  }
  // The ledger is the truth: without it, nothing is resolved.
  auto listed = EffectsByCommand(ledger_address);
  if (!listed.ok()) return 0;
  std::map<std::string, int> effects = *std::move(listed);
  int resolved = 0;
  for (const auto& record : parked.records()) {
    v1::ResolveParkedRequest resolve;
    resolve.set_idempotency_key(record.idempotency_key());
    resolve.set_applied(effects[record.command_id()] > 0);
    resolve.set_operator_note("checked the ledger's effect ledger");
    v1::ResolveParkedResponse response;
    auto call = Context(5000);
    call->AddMetadata(kTenantHeader, "acme");
    call->AddMetadata(kOperatorHeader, "kill-test");
    resolved += admin->ResolveParked(call.get(), resolve, &response).ok();
  }
  return resolved;
}

int64_t Waiting(const std::string& agent_address) {
  auto agent = v1::Agent::NewStub(Channel(agent_address));
  v1::StatsResponse stats;
  auto context = Context(5000);
  if (!agent->Stats(context.get(), v1::StatsRequest(), &stats).ok()) return -1;
  int64_t waiting = 0;
  for (const auto& c : stats.counts()) {
    if (!IsFinal(c.state())) waiting += c.count();
  }
  return waiting;
}

Verdict WaitAndCheck(const std::string& agent_address, const std::string& ledger_address,
                     const std::set<std::string>& acked, int64_t timeout_ms) {
  auto agent = v1::Agent::NewStub(Channel(agent_address));
  int64_t deadline = NowMs() + timeout_ms;
  while (NowMs() < deadline) {
    v1::StatsResponse stats;
    auto context = Context(5000);
    if (agent->Stats(context.get(), v1::StatsRequest(), &stats).ok()) {
      int64_t waiting = 0;
      for (const auto& c : stats.counts()) {
        if (!IsFinal(c.state())) waiting += c.count();
      }
      if (waiting == 0) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }

  Verdict v;
  absl::StatusOr<std::map<std::string, v1::OutboxRecord>> listed =
      absl::UnavailableError("not listed yet");
  for (int attempt = 0; attempt < 5 && !listed.ok(); ++attempt) {
    if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    listed = AllRecords(*agent);
  }
  v.listed_all = listed.ok();
  if (!listed.ok()) v.list_error = std::string(listed.status().message());
  std::map<std::string, v1::OutboxRecord> records =
      listed.ok() ? *std::move(listed) : std::map<std::string, v1::OutboxRecord>();

  v.acked = static_cast<int64_t>(acked.size());
  // A ledger that cannot be read counts as one without effects: the verdict then fails.
  const Judgement judged =
      Judge(acked, records, {EffectsByCommand(ledger_address).value_or(std::map<std::string, int>())});
  v.applied = judged.applied;
  v.rejected = judged.rejected;
  v.not_final = judged.not_final;
  v.other_final = judged.conflicts + judged.dead_letters + judged.other_final;
  v.lost = judged.lost;
  v.duplicate_effects = judged.duplicate_effects;
  v.effects = judged.effects;
  if (auto total = LedgerTotal(ledger_address); total.ok()) {
    v.total = total->total_balance();
    v.minted = total->total_minted();
    v.conserved = total->total_balance() == total->total_minted();
  }
  return v;
}

std::string Verdict::ToString() const {
  return absl::StrFormat(
      "acked=%d applied=%d rejected=%d not_final=%d other_final=%d lost=%d "
      "duplicate_effects=%d effects=%d total=%d minted=%d conserved=%s%s",
      acked, applied, rejected, not_final, other_final, lost, duplicate_effects, effects, total,
      minted, conserved ? "true" : "false",
      listed_all ? "" : " (the agent's records could not all be listed: " + list_error + ")");
}

}  // namespace eonce::testing
