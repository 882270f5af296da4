#include "tests/faults/chaos_stack.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/coord/seed.h"
#include "eonce/v1/outcome.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "common/command/command.h"

extern char** environ;

namespace eonce::testing {
namespace {

std::string Loopback(const std::string& port) { return "127.0.0.1:" + port; }

// The follow-ups `tenant`'s relay has still to take from the ledger at `address` (-1: it
// cannot be asked).
int64_t FollowUpsOf(const std::string& address, const std::string& tenant) {
  auto stub = v1::FollowUps::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  context.AddMetadata(kComponentHeader, "checker");
  context.AddMetadata(kTenantHeader, tenant);
  v1::PullFollowUpsRequest request;
  request.set_limit(1000);
  v1::PullFollowUpsResponse response;
  if (!stub->PullFollowUps(&context, request, &response).ok()) return -1;
  return response.follow_ups_size();
}

}  // namespace

void FaultLog::Count(const std::string& fault, int n) {
  absl::MutexLock lock(&mu_);
  counts_[fault] += n;
}

void FaultLog::Note(const std::string& fault, const std::string& note) {
  absl::MutexLock lock(&mu_);
  counts_[fault] += 0;
  std::string& notes = notes_[fault];
  if (!notes.empty()) notes += "; ";
  notes += note;
}

std::map<std::string, int> FaultLog::counts() const {
  absl::MutexLock lock(&mu_);
  return counts_;
}

std::string FaultLog::Table() const {
  absl::MutexLock lock(&mu_);
  std::string out = absl::StrFormat("%-34s %6s  %s\n", "fault", "count", "what came of it");
  for (const auto& [fault, n] : counts_) {
    auto it = notes_.find(fault);
    absl::StrAppendFormat(&out, "%-34s %6d  %s\n", fault, n,
                          it == notes_.end() ? "" : it->second);
  }
  return out;
}

ChaosStack::ChaosStack(std::string dir, ChaosOptions options, FaultLog& log)
    : dir_(std::move(dir)), options_(std::move(options)), log_(log),
      prefix_(absl::StrCat("/eonce/chaos", options_.seed)) {}

ChaosStack::~ChaosStack() {
  absl::MutexLock lock(&mu_);
  for (int i = 0; i < kChaosShards; ++i) {
    if (paused_[i] && sidecars_[i].process != nullptr) sidecars_[i].process->Signal(SIGCONT, false);
  }
  std::vector<PortedProcess*> all;
  for (auto& a : agents_) all.push_back(&a);
  for (int i = 0; i < kChaosShards; ++i) {
    for (auto& r : relays_[i]) all.push_back(&r);
    all.push_back(&sidecars_[i]);
    all.push_back(&ledgers_[i]);
  }
  for (PortedProcess* p : all) {
    if (p->process != nullptr) p->process->Signal(SIGKILL, true);
  }
}

std::string ChaosStack::Endpoints() const { return etcd_->Endpoints(); }

PortedProcess ChaosStack::Sidecar(int i, const std::string& endpoints) {
  PortedProcess p;
  p.name = absl::StrCat("s", i);
  p.binary = "dedupe_sidecar/dedupe_sidecar";
  p.args = {absl::StrCat("--data_dir=", dir_, "/s", i),
            "--lease_ms=3000",
            "--forward_timeout_ms=1000",
            "--outcome_query_timeout_ms=1000",
            "--drain_ms=500",
            absl::StrCat("--shard_id=s", i),
            "--etcd_endpoints=" + endpoints,
            "--etcd_prefix=" + prefix_,
            absl::StrCat("--lease_ttl_ms=", options_.lease_ttl_ms)};
  if (options_.move_business_data) p.args.push_back("--move_business_data");
  return p;
}

absl::Status ChaosStack::Start() {
  absl::StatusOr<std::unique_ptr<EtcdCluster>> etcd = EtcdCluster::Start(kEtcdMembers);
  if (!etcd.ok()) return etcd.status();
  etcd_ = std::move(*etcd);
  EtcdClientOptions client;
  client.endpoints = *ParseEtcdEndpoints(etcd_->Endpoints());
  client.call_timeout_ms = 5'000;
  absl::StatusOr<std::unique_ptr<EtcdClient>> created = EtcdClient::Create(client);
  if (!created.ok()) return created.status();
  etcd_client_ = std::move(*created);
  store_ = std::make_unique<EtcdMapStore>(*etcd_client_, prefix_);
  // s1 reaches every member through a proxy of its own, so that it alone can be cut off.
  std::vector<std::string> proxied;
  for (int member = 0; member < etcd_->size(); ++member) {
    absl::StatusOr<std::unique_ptr<FaultProxy>> proxy =
        FaultProxy::Start(etcd_->ClientAddress(member), options_.seed * 31 + member);
    if (!proxy.ok()) return proxy.status();
    proxied.push_back((*proxy)->address());
    etcd_proxies_.push_back(std::move(*proxy));
  }
  for (int i = 0; i < kChaosShards; ++i) {
    ledgers_[i] = {absl::StrCat("ledger", i), "services/ledger/ledger_service",
                   {absl::StrCat("--data_dir=", dir_, "/ledger", i), "--cross_slot_credits"}};
    sidecars_[i] = Sidecar(i, i == kPartitionedShard ? absl::StrJoin(proxied, ",") : Endpoints());
  }
  for (int i = 0; i < 3; ++i) {
    if (absl::Status s = StartShard(i); !s.ok()) return s;
  }
  // The first map, from a file, seeds the empty store: an even split over s0..s2.
  std::vector<v1::ShardInfo> infos(3);
  for (int i = 0; i < 3; ++i) {
    infos[i].set_id(absl::StrCat("s", i));
    infos[i].set_address(SidecarAddress(i));
  }
  absl::StatusOr<SlotMap> seeded = SeedSlotMap(*store_, *SlotMap::Even(infos));
  if (!seeded.ok()) return seeded.status();
  for (size_t t = 0; t < options_.tenants.size(); ++t) {
    agents_.push_back({absl::StrCat("agent-", options_.tenants[t]),
                       "outbox_agent/outbox_agent",
                       {absl::StrCat("--data_dir=", dir_, "/agent-", options_.tenants[t]),
                        "--tenant=" + options_.tenants[t], "--sidecar=" + SidecarAddress(0),
                        "--routes=eonce.ledger.v1.Ledger=sharded:" + SidecarAddress(0),
                        "--base_backoff_ms=20", "--max_backoff_ms=500",
                        "--submit_timeout_ms=2000", "--claim_ttl_ms=5000",
                        "--max_attempts=100000", "--drain_ms=500"}});
    if (absl::Status s = StartOnItsPort(agents_.back(), dir_); !s.ok()) return s;
  }
  for (int i = 0; i < 3; ++i) {
    if (absl::Status s = StartRelays(i); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status ChaosStack::StartShard(int i) {
  if (absl::Status s = StartOnItsPort(ledgers_[i], dir_); !s.ok()) return s;
  sidecars_[i].args.push_back("--upstream=" + LedgerAddress(i));
  absl::Status started = StartOnItsPort(sidecars_[i], dir_);
  if (started.ok()) {
    absl::MutexLock lock(&mu_);
    live_[i] = true;
  }
  return started;
}

absl::Status ChaosStack::StartRelays(int i) {
  for (const std::string& tenant : options_.tenants) {
    absl::MutexLock lock(&mu_);  // a kill must not meet a relay half started
    relays_[i].push_back({absl::StrCat("relay", i, "-", tenant),
                          "outbox_agent/outbox_agent",
                          {absl::StrCat("--data_dir=", dir_, "/relay", i, "-", tenant),
                           "--tenant=" + tenant, "--sidecar=" + SidecarAddress(0),
                           "--routes=eonce.ledger.v1.Ledger=sharded:" + SidecarAddress(0),
                           "--relay_from=" + LedgerAddress(i), "--base_backoff_ms=20",
                           "--max_backoff_ms=500", "--submit_timeout_ms=2000",
                           "--claim_ttl_ms=5000", "--max_attempts=100000", "--drain_ms=500"}});
    if (absl::Status s = StartOnItsPort(relays_[i].back(), dir_); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status ChaosStack::AddShard(int i) {
  if (absl::Status s = StartShard(i); !s.ok()) return s;
  return StartRelays(i);
}

bool ChaosStack::StopShard(int i) {
  {
    absl::MutexLock lock(&mu_);
    live_[i] = false;  // no more kills: it is leaving
  }
  bool drained = false;
  for (int round = 0; round < 600 && !drained; ++round) {
    drained = true;
    for (size_t t = 0; t < options_.tenants.size(); ++t) {
      drained = drained && FollowUpsOf(LedgerAddress(i), options_.tenants[t]) == 0 &&
                Waiting(RelayAddress(i, static_cast<int>(t))) == 0;
    }
    if (!drained) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  absl::MutexLock lock(&mu_);
  for (auto& relay : relays_[i]) relay.process->Signal(SIGTERM, true);
  sidecars_[i].process->Signal(SIGTERM, true);
  ledgers_[i].process->Signal(SIGTERM, true);
  return drained;
}

int64_t ChaosStack::PendingFollowUps(int i) const {
  int64_t pending = 0;
  for (const std::string& tenant : options_.tenants) {
    const int64_t n = FollowUpsOf(LedgerAddress(i), tenant);
    if (n < 0) return -1;
    pending += n;
  }
  return pending;
}

absl::Status ChaosStack::ReopenLedger(int i) { return StartOnItsPort(ledgers_[i], dir_); }

absl::StatusOr<std::string> ChaosStack::KillOne(std::mt19937_64& rng) {
  absl::MutexLock lock(&mu_);
  // One kind of process first, then one of that kind: etcd members are killed as often
  // as sidecars, though there are fewer of them.
  const char* kinds[] = {"etcd member", "sidecar", "ledger", "agent", "relay"};
  const std::string kind = kinds[rng() % 5];
  if (kind == "etcd member") {
    // Down for 0-1 s, then back on its data; the next kill comes after, so never two down.
    const int member = static_cast<int>(rng() % kEtcdMembers);
    etcd_->Kill(member);
    std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 1000));
    if (absl::Status s = etcd_->Restart(member); !s.ok()) return s;
    return kind;
  }
  std::vector<PortedProcess*> victims;
  for (auto& a : agents_) {
    if (kind == "agent") victims.push_back(&a);
  }
  for (int i = 0; i < kChaosShards; ++i) {
    if (!live_[i]) continue;
    if (kind == "sidecar" && !paused_[i]) victims.push_back(&sidecars_[i]);
    if (kind == "ledger") victims.push_back(&ledgers_[i]);
    for (auto& r : relays_[i]) {
      if (kind == "relay") victims.push_back(&r);
    }
  }
  if (victims.empty()) return std::string();
  PortedProcess* victim = victims[rng() % victims.size()];
  victim->process->Signal(SIGKILL, true);
  if (absl::Status s = StartOnItsPort(*victim, dir_); !s.ok()) return s;
  return kind;
}

void ChaosStack::Pause(int shard) {
  absl::MutexLock lock(&mu_);
  paused_[shard] = true;
  sidecars_[shard].process->Signal(SIGSTOP, false);
}

void ChaosStack::Resume(int shard) {
  absl::MutexLock lock(&mu_);
  sidecars_[shard].process->Signal(SIGCONT, false);
  paused_[shard] = false;
}

void ChaosStack::Partition(bool on) {
  for (auto& proxy : etcd_proxies_) proxy->SetBlackhole(on);
}

pid_t ChaosStack::StartReshard(const std::vector<std::string>& flags) {
  std::vector<std::string> args = {"tools/reshard/reshard", "--etcd_endpoints=" + Endpoints(),
                                   "--etcd_prefix=" + prefix_, "--tenant=acme",
                                   "--operator_name=root", "--drain_timeout_ms=2000"};
  args.insert(args.end(), flags.begin(), flags.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  const std::string log = dir_ + "/reshard.log";
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = -1;
  if (posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ) != 0) pid = -1;
  posix_spawn_file_actions_destroy(&actions);
  return pid;
}

int ChaosStack::Reap(pid_t pid, int64_t timeout_ms) {
  if (pid <= 0) return -1;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int ChaosStack::TryReap(pid_t pid) {
  int status = 0;
  if (pid <= 0) return -1;
  if (waitpid(pid, &status, WNOHANG) == 0) return -2;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int ChaosStack::ReshardUntilDone(const std::vector<std::string>& flags, std::mt19937_64& rng) {
  int killed = 0;
  for (int run = 0; run < 100; ++run) {
    pid_t pid = StartReshard(flags);
    if (pid <= 0) return -1;
    const bool kill_it = rng() % 3 == 0;
    const int64_t kill_after_ms = static_cast<int64_t>(rng() % 300);
    if (kill_it) {
      std::this_thread::sleep_for(std::chrono::milliseconds(kill_after_ms));
      kill(pid, SIGKILL);  // not yet reaped: if it ended already, Reap reads how
    }
    const int status = Reap(pid, 60'000);
    if (kill_it && status != 0) ++killed;
    if (status == 0) return killed;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // a shard may be restarting
  }
  return -1;
}

absl::StatusOr<SlotMap> ChaosStack::ReadMap() { return store_->Read(); }

std::string ChaosStack::SidecarAddress(int shard) const {
  return Loopback(sidecars_[shard].port);
}
std::string ChaosStack::LedgerAddress(int shard) const { return Loopback(ledgers_[shard].port); }
std::string ChaosStack::AgentAddress(int tenant) const { return Loopback(agents_[tenant].port); }
std::string ChaosStack::RelayAddress(int shard, int tenant) const {
  return Loopback(relays_[shard][tenant].port);
}

}  // namespace eonce::testing
