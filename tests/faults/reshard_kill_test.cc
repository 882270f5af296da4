// Live resharding under kill -9, with the real binaries: sharded sidecars, an agent
// routing by slot, and a load of account openings and transfers (most of them between
// accounts on different shards) with duplicate submissions. Either one ledger behind
// every shard (its data shared), or a ledger per shard: then each shard is a ledger
// (--cross_slot_credits), its sidecar (--move_business_data) and a relay agent
// (--relay_from), a transfer between shards is a debit there and a credit relayed here,
// and a slot move carries the accounts too. The slot map and the shards' leases are in a
// real etcd member (tests/util/etcd_cluster.h). The stack runs 3 shards, grows to 5, then
// shrinks to 2, each step a slot move by the real `eonce reshard`, while every 100-400 ms a
// random process (a ledger, the agent, any live shard's sidecar or relay) is killed with SIGKILL
// and started again, and about one run of reshard in three is itself killed mid-move and
// run again. The verdict comes from the ledger's effect ledger: every acknowledged command
// is final, none is lost, none has two effects, and the money is conserved.
//
// Four runs: the shared inbox ledger; a shared ledger without an inbox (where only the
// moved records stop a second effect; unknown outcomes are parked and the test resolves
// them as the operator would); a ledger per shard, where the verdict also needs every
// credit applied once, the money conserved across the shards and every account at its
// slot's owner only; and that run's negative control, whose sidecars leave the accounts
// behind when slots move (caught: accounts on shards that do not own them).
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <fcntl.h>
#include <random>
#include <thread>

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
#include "tests/faults/reshard_stack.h"
#include "tests/faults/stack.h"
#include "tests/util/etcd_cluster.h"
#include "tests/util/ground_truth.h"
#include "tests/util/temp_dir.h"

extern char** environ;

namespace eonce::testing {
namespace {

// Runs `eonce reshard` until one run finishes the move; each run is killed with SIGKILL
// after 0-100 ms with probability 1/3. Returns how many runs were killed, or -1 if the
// move never finished (bounded: 200 runs).
int MoveUntilDone(const std::string& dir, const std::vector<std::string>& flags,
                  std::mt19937_64& rng) {
  int killed = 0;
  for (int run = 0; run < 200; ++run) {
    std::vector<std::string> args = {"tools/reshard/reshard", "--tenant=acme",
                                     "--operator_name=root", "--drain_timeout_ms=2000"};
    args.insert(args.end(), flags.begin(), flags.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    const std::string log = dir + "/reshard.log";
    posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    pid_t pid = 0;
    int spawned = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (spawned != 0) return -1;
    const bool kill_it = rng() % 3 == 0;
    const auto kill_at = std::chrono::steady_clock::now() + std::chrono::milliseconds(rng() % 100);
    int status = 0;
    while (waitpid(pid, &status, WNOHANG) == 0) {
      if (kill_it && std::chrono::steady_clock::now() >= kill_at) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        ++killed;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return killed;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // a shard may be restarting
  }
  return -1;
}

// How many of acct0..acct<accounts-1> are not held by exactly one ledger, their slot's
// owner in `map`: an account left behind by a move, or copied and not dropped.
int MisplacedAccounts(ShardedStack& stack, const SlotMap& map, int accounts) {
  int misplaced = 0;
  for (int a = 0; a < accounts; ++a) {
    const std::string id = absl::StrCat("acct", a);
    const std::string owner = map.OwnerOf(SlotOf("acme", "account", id));
    int held_by_owner = 0, held_elsewhere = 0;
    for (int i = 0; i < kMaxShards; ++i) {
      auto stub = ledger::v1::Ledger::NewStub(
          grpc::CreateChannel(stack.LedgerAddress(i), grpc::InsecureChannelCredentials()));
      auto context = Deadline(5);
      context->AddMetadata(kComponentHeader, "checker");
      ledger::v1::GetAccountRequest request;
      request.set_id(id);
      ledger::v1::Account account;
      if (!stub->GetAccount(context.get(), request, &account).ok()) continue;
      (absl::StrCat("s", i) == owner ? held_by_owner : held_elsewhere)++;
    }
    if (held_by_owner != 1 || held_elsewhere != 0) ++misplaced;
  }
  return misplaced;
}

// What a run with a ledger per shard comes to, once nothing is in flight.
struct PerShardVerdict {
  bool quiet = false;  // no agent waiting, no credit in any outbox
  Judgement judged;    // every command, from all the ledgers' effects merged
  int64_t credits = 0, credit_effects = 0;
  ledger::v1::GetTotalResponse money;  // summed over the shards
  int misplaced_accounts = 0;
};

// Waits (bounded) until nothing is in flight anywhere, neither in the agents nor in the
// ledgers' outboxes (a bounced credit comes back as a refund: a second round), then reads
// every ledger: effects merged (so that one command applied on two shards counts as a
// duplicate), money summed, and where each account is.
PerShardVerdict CheckPerShard(ShardedStack& stack, const std::set<std::string>& acked,
                              const SlotMap& map, int accounts) {
  PerShardVerdict v;
  for (int i : {2, 3, 4}) EXPECT_TRUE(stack.ReopenLedger(i).ok());
  for (int round = 0; round < 900 && !v.quiet; ++round) {  // at most 3 minutes
    v.quiet = Waiting(stack.agent_address()) == 0;
    for (int i : {0, 1}) v.quiet = v.quiet && Waiting(stack.RelayAddress(i)) == 0;
    for (int i = 0; i < kMaxShards; ++i) {
      v.quiet = v.quiet && PendingFollowUps(stack.LedgerAddress(i)) == 0;
    }
    if (!v.quiet) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  std::vector<std::string> ledgers;
  for (int i = 0; i < kMaxShards; ++i) ledgers.push_back(stack.LedgerAddress(i));
  absl::StatusOr<std::map<std::string, int>> merged = EffectsByCommandAcross(ledgers);
  EXPECT_TRUE(merged.ok()) << merged.status();
  const std::map<std::string, int> effects = merged.value_or(std::map<std::string, int>());
  absl::StatusOr<ledger::v1::GetTotalResponse> money = LedgerTotalAcross(ledgers);
  EXPECT_TRUE(money.ok()) << money.status();
  if (money.ok()) v.money = *money;
  auto agent = v1::Agent::NewStub(
      grpc::CreateChannel(stack.agent_address(), grpc::InsecureChannelCredentials()));
  auto records = AllRecords(*agent);
  EXPECT_TRUE(records.ok()) << records.status();
  v.judged = Judge(acked, records.value_or(std::map<std::string, v1::OutboxRecord>()), {effects});
  for (const auto& [id, n] : effects) {
    if (id.rfind("fu-", 0) == 0) {
      ++v.credits;
      v.credit_effects += n;
    }
  }
  v.misplaced_accounts = MisplacedAccounts(stack, map, accounts);
  std::printf("per-shard ledgers: quiet=%d applied=%ld rejected=%ld lost=%ld "
              "duplicate_effects=%ld credits=%ld balance=%ld minted=%ld sent=%ld received=%ld "
              "unclaimed=%ld misplaced_accounts=%d\n",
              v.quiet, static_cast<long>(v.judged.applied), static_cast<long>(v.judged.rejected),
              static_cast<long>(v.judged.lost), static_cast<long>(v.judged.duplicate_effects),
              static_cast<long>(v.credits), static_cast<long>(v.money.total_balance()),
              static_cast<long>(v.money.total_minted()), static_cast<long>(v.money.credits_sent()),
              static_cast<long>(v.money.credits_received()),
              static_cast<long>(v.money.unclaimed()), v.misplaced_accounts);
  return v;
}

void ExpectCorrect(const PerShardVerdict& v, size_t acked) {
  EXPECT_TRUE(v.quiet) << "credits still in flight";
  EXPECT_EQ(v.judged.lost, 0);
  EXPECT_EQ(v.judged.duplicate_effects, 0);
  EXPECT_EQ(v.judged.not_final + v.judged.conflicts + v.judged.dead_letters +
                v.judged.other_final,
            0);
  EXPECT_EQ(v.judged.applied + v.judged.rejected, static_cast<int64_t>(acked));
  EXPECT_GT(v.credits, 0);  // transfers did cross shards
  EXPECT_EQ(v.credit_effects, v.credits);
  // Nothing in flight, so every debit's credit landed once: the money adds up.
  EXPECT_EQ(v.money.credits_sent(), v.money.credits_received());
  EXPECT_EQ(v.money.total_balance() + v.money.unclaimed(), v.money.total_minted());
  // Every account moved with its slot, and only one copy is left.
  EXPECT_EQ(v.misplaced_accounts, 0);
}

void RunOnce(uint64_t seed, Ledgers ledgers) {
  const bool legacy = ledgers == Ledgers::kSharedLegacy;
  SCOPED_TRACE(absl::StrCat("seed ", seed, legacy ? " (legacy ledger)" : "",
                            ledgers == Ledgers::kPerShard ? " (a ledger per shard)" : ""));
  ShardedStack stack(FreshDir(absl::StrCat("reshard-kill", seed)), ledgers);
  ASSERT_TRUE(stack.Start().ok());

  constexpr int kAccounts = 40;
  constexpr int kCommands = 3000;
  LoadClient load(stack.agent_address());
  std::atomic<bool> loading{true};
  int64_t not_enqueued = 0;
  std::thread producer([&] {
    not_enqueued = load.Run(kAccounts, 1000, kCommands - kAccounts, /*threads=*/4, seed);
    loading.store(false);
  });

  // The moves: 3 -> 5 shards, then 5 -> 2, on their own thread.
  std::atomic<bool> moving{true};
  int moves = 0, reshard_kills = 0;
  bool moves_ok = true;
  std::thread mover([&] {
    std::mt19937_64 rng(seed * 7 + 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    auto move = [&](uint32_t first, uint32_t last, int to, bool with_address) {
      std::vector<std::string> flags = stack.EtcdFlags();
      flags.push_back(absl::StrCat("--slots=", first, "-", last));
      flags.push_back(absl::StrCat("--to=s", to));
      if (with_address) flags.push_back("--to_address=" + stack.Address(to));
      int killed = MoveUntilDone(stack.dir(), flags, rng);
      if (killed < 0) moves_ok = false;
      reshard_kills += std::max(killed, 0);
      ++moves;
    };
    for (int i : {3, 4}) moves_ok = moves_ok && stack.AddShard(i).ok();
    move(0, 99, 3, true);
    move(342, 441, 4, true);
    move(683, 782, 3, false);
    // 5 -> 2: every run s2, s3 and s4 own goes to s0 or s1, then they leave.
    for (int leaving : {2, 3, 4}) {
      absl::StatusOr<SlotMap> map = stack.store().Read();
      if (!map.ok()) { moves_ok = false; break; }
      for (const v1::SlotRange& range : map->proto().ranges()) {
        if (range.shard() == absl::StrCat("s", leaving) && moves_ok) {
          move(range.first(), range.last(), static_cast<int>(range.first() % 2), false);
        }
      }
    }
    for (int i : {2, 3, 4}) moves_ok = stack.StopShard(i) && moves_ok;
    moving.store(false);
  });

  std::mt19937_64 rng(seed);
  std::map<std::string, int> kills;
  absl::Status restart_failure;
  auto stop_at = std::chrono::steady_clock::now() + std::chrono::minutes(5);
  for (int k = 0; k < 3000 && (loading.load() || moving.load()) &&
                  std::chrono::steady_clock::now() < stop_at;
       ++k) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100 + rng() % 301));
    absl::StatusOr<std::string> victim = stack.KillOne(rng);
    if (!victim.ok()) {
      restart_failure = victim.status();
      break;
    }
    const std::string& name = *victim;
    kills[name[0] == 's' ? "sidecar" : name.rfind("ledger", 0) == 0 ? "ledger"
                          : name.rfind("relay", 0) == 0         ? "relay"
                                                                : name]++;
  }
  producer.join();
  mover.join();
  ASSERT_TRUE(restart_failure.ok()) << restart_failure << " (logs in " << stack.dir() << ")";
  EXPECT_TRUE(moves_ok) << "a move never finished (logs in " << stack.dir() << ")";
  EXPECT_EQ(not_enqueued, 0);
  absl::StatusOr<SlotMap> final_map = stack.store().Read();
  ASSERT_TRUE(final_map.ok());
  EXPECT_EQ(final_map->WritableSlotsOf("s0") + final_map->WritableSlotsOf("s1"), kSlotCount);
  EXPECT_TRUE(final_map->proto().migrations().empty());

  int resolved = 0;
  if (legacy) {
    for (int round = 0; round < 240; ++round) {  // at most 240 rounds of 500 ms
      for (int shard : {0, 1}) {
        resolved += ResolveParkedFromTheLedger(stack.Address(shard), stack.ledger_address());
      }
      if (Waiting(stack.agent_address()) == 0) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
  }
  std::printf("reshard-kill seed=%lu%s moves=%d reshard_runs_killed=%d kills: agent=%d "
              "ledger=%d sidecar=%d relay=%d parked_resolved=%d\n",
              static_cast<unsigned long>(seed), legacy ? " legacy" : "", moves, reshard_kills,
              kills["agent"], kills["ledger"], kills["sidecar"], kills["relay"], resolved);
  EXPECT_EQ(load.acked().size(), static_cast<size_t>(kCommands));
  if (stack.per_shard()) {
    PerShardVerdict v = CheckPerShard(stack, load.acked(), *final_map, kAccounts);
    if (ledgers == Ledgers::kPerShardKeepingData) {
      // The negative control: accounts stay where they were opened, and are caught.
      EXPECT_GT(v.misplaced_accounts, 0);
    } else {
      ExpectCorrect(v, load.acked().size());
    }
    EXPECT_EQ(v.money.total_minted(), kAccounts * 1000);
    if (::testing::Test::HasFailure()) KeepLogs(stack.dir());
  } else {
    Verdict v = WaitAndCheck(stack.agent_address(), stack.ledger_address(), load.acked(),
                             /*timeout_ms=*/180'000);
    std::printf("%s\n", v.ToString().c_str());
    EXPECT_EQ(v.acked, kCommands);
    EXPECT_TRUE(v.ok()) << v.ToString() << " (logs in " << stack.dir() << ")";
    if (!v.ok()) KeepLogs(stack.dir());
    EXPECT_EQ(v.minted, kAccounts * 1000);
  }

  // Every finished command sent again, straight to the shard that owns its slot now (after
  // up to two moves): each must be answered from a record that moved with its slot
  // (REPLAYED), byte for byte; one forwarded again would mean a record left behind.
  auto agent = v1::Agent::NewStub(
      grpc::CreateChannel(stack.agent_address(), grpc::InsecureChannelCredentials()));
  auto records = AllRecords(*agent);
  ASSERT_TRUE(records.ok()) << records.status();
  std::unique_ptr<v1::Sidecar::Stub> owners[2] = {
      v1::Sidecar::NewStub(grpc::CreateChannel(stack.Address(0), grpc::InsecureChannelCredentials())),
      v1::Sidecar::NewStub(grpc::CreateChannel(stack.Address(1), grpc::InsecureChannelCredentials()))};
  int replayed = 0, not_replayed = 0;
  for (const auto& [id, record] : *records) {
    if (record.state() != v1::ACKED && record.state() != v1::REJECTED) continue;
    const v1::Entity& entity = record.command().entity();
    const int owner =
        final_map->OwnerOf(SlotOf("acme", entity.type(), entity.id())) == "s0" ? 0 : 1;
    v1::SubmitRequest request;
    *request.mutable_command() = record.command();
    v1::SubmitResponse response;
    grpc::Status status;
    // A sidecar killed last may not hold its shard's lease yet (its old one lapses first,
    // within --lease_ttl_ms): it answers UNAVAILABLE until then. Bounded: 20 s.
    for (int attempt = 0; attempt < 100; ++attempt) {
      grpc::ClientContext context;
      context.AddMetadata(kTenantHeader, "acme");
      context.AddMetadata(kCredentialEpochHeader,
                          absl::StrCat(record.command().credential_epoch()));
      context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
      status = owners[owner]->Submit(&context, request, &response);
      if (status.error_code() != grpc::StatusCode::UNAVAILABLE) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    if (status.ok() && response.disposition() == v1::REPLAYED &&
        response.result().SerializeAsString() == record.result().SerializeAsString()) {
      ++replayed;
    } else {
      ++not_replayed;
    }
  }
  EXPECT_EQ(not_replayed, 0) << replayed << " replayed";
  EXPECT_GT(replayed, 0);
}

const char* Suffix(Ledgers ledgers) {
  switch (ledgers) {
    case Ledgers::kShared:
      return "";
    case Ledgers::kSharedLegacy:
      return "_legacy";
    case Ledgers::kPerShard:
      return "_ledger_per_shard";
    case Ledgers::kPerShardKeepingData:
      return "_ledger_per_shard_NegativeControlDataLeftBehind";
  }
  return "";
}

class ReshardKillTest : public ::testing::TestWithParam<std::pair<int, Ledgers>> {};

TEST_P(ReshardKillTest, ThreeThenFiveThenTwoShardsUnderKillsApplyEveryCommandOnce) {
  RunOnce(static_cast<uint64_t>(GetParam().first), GetParam().second);
}

INSTANTIATE_TEST_SUITE_P(Seeds, ReshardKillTest,
                         ::testing::Values(std::make_pair(1, Ledgers::kShared),
                                           std::make_pair(2, Ledgers::kSharedLegacy),
                                           std::make_pair(3, Ledgers::kPerShard),
                                           std::make_pair(4, Ledgers::kPerShardKeepingData)),
                         [](const auto& info) {
                           return absl::StrCat("seed", info.param.first,
                                               Suffix(info.param.second));
                         });

}  // namespace
}  // namespace eonce::testing
