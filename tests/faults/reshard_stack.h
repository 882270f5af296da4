// The stack of reshard_kill_test: the real binaries of up to five shards (a sidecar per
// shard on a real etcd member, one shared ledger or a ledger and relay per shard) and an
// agent routing by slot, each a child process on loopback that keeps its port across
// kill -9 and restart.
#ifndef EONCE_TESTS_FAULTS_RESHARD_STACK_H_
#define EONCE_TESTS_FAULTS_RESHARD_STACK_H_

#include <signal.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/base/clock.h"
#include "common/coord/etcd_map_store.h"
#include "common/command/command.h"
#include "common/coord/slots.h"
#include "eonce/ledger/v1/ledger.grpc.pb.h"
#include "eonce/v1/agent.grpc.pb.h"
#include "eonce/v1/outcome.grpc.pb.h"
#include "eonce/v1/sidecar.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "tests/faults/stack.h"
#include "tests/util/etcd_cluster.h"
#include "tests/util/ground_truth.h"

namespace eonce::testing {

inline constexpr int kMaxShards = 5;
using Member = PortedProcess;

// kPerShardKeepingData: a ledger per shard whose sidecars do not move the business's data
// (no --move_business_data): the negative control of the per-shard run.
enum class Ledgers { kShared, kSharedLegacy, kPerShard, kPerShardKeepingData };

inline std::unique_ptr<grpc::ClientContext> Deadline(int seconds) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(seconds));
  return context;
}

// The credits a ledger's outbox still holds (-1: it cannot be asked).
inline int64_t PendingFollowUps(const std::string& ledger_address) {
  auto stub = v1::FollowUps::NewStub(
      grpc::CreateChannel(ledger_address, grpc::InsecureChannelCredentials()));
  auto context = Deadline(5);
  context->AddMetadata(kComponentHeader, "checker");  // a business port admits components
  context->AddMetadata(kTenantHeader, "acme");
  v1::PullFollowUpsRequest request;
  request.set_limit(1000);
  v1::PullFollowUpsResponse response;
  if (!stub->PullFollowUps(context.get(), request, &response).ok()) return -1;
  return response.follow_ups_size();
}

class ShardedStack {
 public:
  ShardedStack(std::string dir, Ledgers ledgers)
      : dir_(std::move(dir)), legacy_(ledgers == Ledgers::kSharedLegacy),
        per_shard_(ledgers == Ledgers::kPerShard || ledgers == Ledgers::kPerShardKeepingData),
        move_data_(ledgers == Ledgers::kPerShard) {}
  ~ShardedStack() {
    absl::MutexLock lock(&mu_);
    for (Member* m : All()) {
      if (m->process != nullptr) m->process->Signal(SIGKILL, true);
    }
  }

  absl::Status Start() {
    ledger_ = {"ledger", "services/ledger/ledger_service", {"--data_dir=" + dir_ + "/ledger"}};
    if (legacy_) ledger_.args.push_back("--legacy");
    if (!per_shard_) {
      if (absl::Status s = StartOnItsPort(ledger_, dir_); !s.ok()) return s;
    }
    for (int i = 0; per_shard_ && i < kMaxShards; ++i) {
      ledgers_[i] = {absl::StrCat("ledger", i), "services/ledger/ledger_service",
                     {absl::StrCat("--data_dir=", dir_, "/ledger", i), "--cross_slot_credits"}};
    }
    auto etcd = EtcdCluster::Start(1);
    if (!etcd.ok()) return etcd.status();
    etcd_ = std::move(*etcd);
    EtcdCoordOptions coordination;
    coordination.endpoints = etcd_->Endpoints();
    coordination.prefix = kPrefix;
    auto created = EtcdCoordination::Create(coordination, RealClock::Get());
    if (!created.ok()) return created.status();
    coordination_ = std::move(*created);
    // Three shards under placeholders, then the map that names where they listen.
    std::vector<v1::ShardInfo> infos(3);
    for (int i = 0; i < 3; ++i) {
      infos[i].set_id(absl::StrCat("s", i));
      infos[i].set_address("pending:1");
    }
    absl::StatusOr<SlotMap> first = store().CompareAndSwap(0, *SlotMap::Even(infos));
    if (!first.ok()) return first.status();
    for (int i = 0; i < kMaxShards; ++i) {
      shards_[i] = {absl::StrCat("s", i), "dedupe_sidecar/dedupe_sidecar",
                    {"--data_dir=" + dir_ + "/s" + std::to_string(i), "--lease_ms=3000",
                     "--forward_timeout_ms=1000", "--outcome_query_timeout_ms=1000",
                     "--drain_ms=500", absl::StrCat("--shard_id=s", i),
                     "--etcd_endpoints=" + etcd_->Endpoints(),
                     absl::StrCat("--etcd_prefix=", kPrefix),
                     // The shortest: a killed sidecar's shard is free again 2 s later.
                     "--lease_ttl_ms=2000"}};
      if (move_data_) shards_[i].args.push_back("--move_business_data");
    }
    for (int i = 0; i < 3; ++i) {
      if (absl::Status s = StartShard(i); !s.ok()) return s;
      infos[i].set_address(Address(i));
    }
    absl::StatusOr<SlotMap> named = store().CompareAndSwap(first->epoch(), *SlotMap::Even(infos));
    if (!named.ok()) return named.status();
    for (int i = 0; i < 3; ++i) {
      if (absl::Status s = AwaitEpoch(Address(i), named->epoch()); !s.ok()) return s;
    }
    agent_ = {"agent",
              "outbox_agent/outbox_agent",
              {"--data_dir=" + dir_ + "/agent", "--tenant=acme", "--sidecar=" + Address(0),
               "--routes=eonce.ledger.v1.Ledger=sharded:" + Address(0), "--base_backoff_ms=20",
               "--max_backoff_ms=500", "--submit_timeout_ms=2000", "--claim_ttl_ms=5000",
               "--max_attempts=100000", "--drain_ms=500"}};
    if (legacy_) agent_.args.push_back("--parked_recheck_ms=300");
    if (absl::Status s = StartOnItsPort(agent_, dir_); !s.ok()) return s;
    for (int i = 0; per_shard_ && i < 3; ++i) {
      if (absl::Status s = StartRelay(i); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

  // A shard: its own ledger first (per shard), then its sidecar in front of it.
  absl::Status StartShard(int i) {
    Member& ledger = per_shard_ ? ledgers_[i] : ledger_;
    if (per_shard_) {
      if (absl::Status s = StartOnItsPort(ledger, dir_); !s.ok()) return s;
    }
    shards_[i].args.push_back("--upstream=" + ledger.process->address());
    absl::Status started = StartOnItsPort(shards_[i], dir_);
    if (started.ok()) {
      absl::MutexLock lock(&mu_);
      live_[i] = true;
    }
    return started;
  }

  // The relay agent of shard `i`'s ledger: its credits to other shards' accounts.
  absl::Status StartRelay(int i) {
    relays_[i] = {absl::StrCat("relay", i),
                  "outbox_agent/outbox_agent",
                  {absl::StrCat("--data_dir=", dir_, "/relay", i), "--tenant=acme",
                   "--sidecar=" + Address(0),
                   "--routes=eonce.ledger.v1.Ledger=sharded:" + Address(0),
                   "--relay_from=" + ledgers_[i].process->address(), "--base_backoff_ms=20",
                   "--max_backoff_ms=500", "--submit_timeout_ms=2000", "--claim_ttl_ms=5000",
                   "--max_attempts=100000", "--drain_ms=500"}};
    absl::Status started = StartOnItsPort(relays_[i], dir_);
    if (started.ok()) {
      absl::MutexLock lock(&mu_);
      live_[i] = true;
    }
    return started;
  }

  // A new shard of the grown stack: its ledger, sidecar and relay.
  absl::Status AddShard(int i) {
    if (absl::Status s = StartShard(i); !s.ok()) return s;
    return per_shard_ ? StartRelay(i) : absl::OkStatus();
  }

  // A shard whose slots all moved away leaves (SIGTERM): the stack shrinks. Per shard,
  // its ledger's outbox and its relay are drained first (bounded: 2 minutes), since the
  // credits they hold are money in flight; false if they never drained.
  bool StopShard(int i) {
    {
      absl::MutexLock lock(&mu_);
      live_[i] = false;  // no more kills: it is leaving
    }
    bool drained = true;
    if (per_shard_) {
      drained = false;
      for (int round = 0; round < 600 && !drained; ++round) {
        drained = PendingFollowUps(LedgerAddress(i)) == 0 &&
                  Waiting("127.0.0.1:" + relays_[i].port) == 0;
        if (!drained) std::this_thread::sleep_for(std::chrono::milliseconds(200));
      }
      relays_[i].process->Signal(SIGTERM, true);
    }
    shards_[i].process->Signal(SIGTERM, true);
    if (per_shard_) ledgers_[i].process->Signal(SIGTERM, true);
    return drained;
  }

  // Starts a stopped shard's ledger again, alone, so that its effects and money can be read.
  absl::Status ReopenLedger(int i) { return StartOnItsPort(ledgers_[i], dir_); }

  // kill -9 a random live process and start it again on its port and data.
  absl::StatusOr<std::string> KillOne(std::mt19937_64& rng) {
    absl::MutexLock lock(&mu_);
    std::vector<Member*> victims = {&agent_};
    if (!per_shard_) victims.push_back(&ledger_);
    for (int i = 0; i < kMaxShards; ++i) {
      if (!live_[i]) continue;
      victims.push_back(&shards_[i]);
      if (per_shard_) {
        victims.push_back(&ledgers_[i]);
        if (relays_[i].process != nullptr) victims.push_back(&relays_[i]);
      }
    }
    Member* victim = victims[rng() % victims.size()];
    victim->process->Signal(SIGKILL, true);
    absl::Status started = StartOnItsPort(*victim, dir_);
    if (!started.ok()) return started;
    return victim->name;
  }

  std::string Address(int shard) const { return "127.0.0.1:" + shards_[shard].port; }
  std::string agent_address() const { return "127.0.0.1:" + agent_.port; }
  std::string ledger_address() const { return "127.0.0.1:" + ledger_.port; }
  std::string LedgerAddress(int shard) const { return "127.0.0.1:" + ledgers_[shard].port; }
  std::string RelayAddress(int shard) const { return "127.0.0.1:" + relays_[shard].port; }
  bool per_shard() const { return per_shard_; }
  MapStore& store() { return coordination_->store(); }
  // The flags of `eonce reshard` that reach the map.
  std::vector<std::string> EtcdFlags() const {
    return {"--etcd_endpoints=" + etcd_->Endpoints(), absl::StrCat("--etcd_prefix=", kPrefix)};
  }
  const std::string& dir() const { return dir_; }

 private:
  std::vector<Member*> All() {
    std::vector<Member*> all = {&agent_, &ledger_};
    for (auto& shard : shards_) all.push_back(&shard);
    for (auto& ledger : ledgers_) all.push_back(&ledger);
    for (auto& relay : relays_) all.push_back(&relay);
    return all;
  }

  static absl::Status AwaitEpoch(const std::string& address, uint64_t epoch) {
    auto stub = v1::Sidecar::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
    for (int i = 0; i < 100; ++i) {
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
      v1::SlotMap map;
      if (stub->GetSlotMap(&context, v1::GetSlotMapRequest(), &map).ok() && map.epoch() >= epoch) {
        return absl::OkStatus();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return absl::DeadlineExceededError(absl::StrCat(address, " never adopted epoch ", epoch));
  }

  const std::string dir_;
  const bool legacy_;
  const bool per_shard_;
  const bool move_data_;
  static constexpr char kPrefix[] = "/eonce/reshard_kill";
  std::unique_ptr<EtcdCluster> etcd_;
  std::unique_ptr<EtcdCoordination> coordination_;
  absl::Mutex mu_;  // one kill or stop at a time
  Member ledger_, agent_;
  Member shards_[kMaxShards];
  Member ledgers_[kMaxShards];  // per shard
  Member relays_[kMaxShards];   // per shard
  bool live_[kMaxShards] = {};
};

}  // namespace eonce::testing

#endif  // EONCE_TESTS_FAULTS_RESHARD_STACK_H_
