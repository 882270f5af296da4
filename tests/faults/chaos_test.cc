// Chaos for sharding on etcd, every process real, on loopback: 3 etcd members, shards
// going 3 -> 5 -> 2 by the real `eonce reshard`, a ledger per shard (--cross_slot_credits)
// with a relay per tenant, two tenants each with its own agent routing by slot, and load
// with duplicates (the producer's retries, the agents' replays, and finished commands
// sent again straight to a random shard while slots move). Meanwhile:
//   - every 250-650 ms a random process is killed with SIGKILL and started again: an etcd
//     member (never two down at once: the cluster keeps its quorum), a sidecar, a ledger,
//     an agent or a relay;
//   - the mover races: the first move is run by two reshard processes at once; about one
//     run in three is killed mid-move and run again;
//   - the paused leader: the old owner's sidecar of one run is stopped (SIGSTOP) after the
//     copy, the move flips without it, and it is continued (SIGCONT) after the flip;
//   - a partition: s1's sidecar reaches etcd only through proxies, which are blackholed
//     until its lease has lapsed and a while after (agents still reach it).
// The verdict (chaos_checker.h) comes from every shard's effect ledger, accounts and
// totals, per tenant: no acknowledged command lost, none with two effects, the money of
// each tenant conserved, every account at its slot's owner only; and s1 applied nothing
// while it could not know it held its lease. A table of the faults injected and one of
// the results are printed.
//
// One seed in `./eonce test`; EONCE_KILL_RUNS=N (./eonce faults N) runs N seeds. The
// negative control runs the same chaos with sidecars that leave the business's data behind
// when slots move: the checker must find accounts away from their owners.
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/command/command.h"
#include "common/coord/slots.h"
#include "eonce/ledger/v1/ledger.grpc.pb.h"
#include "eonce/v1/agent.grpc.pb.h"
#include "eonce/v1/sidecar.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "tests/faults/chaos_checker.h"
#include "tests/faults/chaos_stack.h"
#include "tests/faults/stack.h"
#include "tests/util/temp_dir.h"

namespace eonce::testing {
namespace {

constexpr int kAccounts = 16;        // a tenant
constexpr int64_t kInitial = 1000;
// Transfers come in rounds, one every ~200 ms, for as long as slots move (bounded), so
// that every fault meets load.
constexpr int kTransfersPerRound = 40;  // a tenant
constexpr int kMaxRounds = 150;

int EnvInt(const char* name, int fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && std::atoi(value) > 0 ? std::atoi(value) : fallback;
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string AccountPrefix(const std::string& tenant) { return tenant.substr(0, 1) + "acct"; }

// A finished command sent again, straight to a shard's sidecar, as a producer's duplicate
// that went around the agent. Returns the disposition's name, or the error's code.
std::string SubmitAgain(const std::string& sidecar, const std::string& tenant,
                        const v1::Command& command) {
  auto stub = v1::Sidecar::NewStub(grpc::CreateChannel(sidecar, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.AddMetadata(kTenantHeader, tenant);
  context.AddMetadata(kCredentialEpochHeader, absl::StrCat(command.credential_epoch()));
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(3));
  v1::SubmitRequest request;
  *request.mutable_command() = command;
  v1::SubmitResponse response;
  grpc::Status status = stub->Submit(&context, request, &response);
  if (!status.ok()) return absl::StrCat("error ", status.error_code());
  return v1::Disposition_Name(response.disposition());
}

// Finished commands of the agent at `agent_address` (one page, from a random point).
std::vector<v1::Command> SomeFinished(const std::string& agent_address, int rounds,
                                      std::mt19937_64& rng) {
  auto agent = v1::Agent::NewStub(
      grpc::CreateChannel(agent_address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(3));
  v1::ListRequest request;
  request.set_limit(20);
  // From a transfer of a round the producer finished (an anchor must exist).
  request.set_after_command_id(absl::StrCat("t", rng() % std::max(rounds, 1), "-",
                                            rng() % kTransfersPerRound));
  v1::ListResponse response;
  std::vector<v1::Command> finished;
  if (!agent->List(&context, request, &response).ok()) return finished;
  for (const auto& r : response.records()) {
    if (r.state() == v1::ACKED || r.state() == v1::REJECTED) finished.push_back(r.command());
  }
  return finished;
}

// Whether `ledger` holds account `id`.
bool HeldBy(ledger::v1::Ledger::Stub& ledger, const std::string& id) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  context.AddMetadata(kComponentHeader, "checker");
  ledger::v1::GetAccountRequest request;
  request.set_id(id);
  ledger::v1::Account account;
  return ledger.GetAccount(&context, request, &account).ok();
}

struct Moves {
  bool ok = true;
  int moves = 0;
  int killed_runs = 0;
  int raced = 0;  // runs that had a second mover at the same time
  std::string timings;  // when each phase ended, in s from the start of the moves
};

// The moves, 3 -> 5 -> 2 shards, with their faults: racing movers, killed movers, the
// paused leader and the partition.
void Move(ChaosStack& stack, FaultLog& log, std::mt19937_64& rng,
          const std::vector<std::pair<std::string, std::string>>& accounts, Moves& m,
          int64_t& partition_from_ms, int64_t& partition_to_ms,
          std::unique_ptr<SlotMap>& map_at_cut, int64_t lease_ttl_ms) {
  auto slots = [](uint32_t first, uint32_t last) {
    return absl::StrCat("--slots=", first, "-", last);
  };
  // A shard not yet in the map is named with its address (s3 and s4 when they join).
  auto to_flags = [&](uint32_t first, uint32_t last, int to) {
    std::vector<std::string> flags = {slots(first, last), absl::StrCat("--to=s", to)};
    if (to >= 3) flags.push_back("--to_address=" + stack.SidecarAddress(to));
    return flags;
  };
  auto move = [&](uint32_t first, uint32_t last, int to) {
    int killed = stack.ReshardUntilDone(to_flags(first, last, to), rng);
    if (killed < 0) m.ok = false;
    m.killed_runs += std::max(killed, 0);
    log.Count("mover killed (SIGKILL) mid-move", std::max(killed, 0));
    ++m.moves;
  };
  const auto started = std::chrono::steady_clock::now();
  auto phase = [&](const char* name) {
    absl::StrAppend(&m.timings, m.timings.empty() ? "" : ", ", name, " ",
                    std::chrono::duration_cast<std::chrono::seconds>(
                        std::chrono::steady_clock::now() - started)
                        .count(),
                    " s");
  };
  for (int i : {3, 4}) m.ok = m.ok && stack.AddShard(i).ok();

  // Two movers race for the same run, then whatever is left is finished by a third.
  {
    const std::vector<std::string> flags = to_flags(0, 99, 3);
    pid_t a = stack.StartReshard(flags), b = stack.StartReshard(flags);
    const int status_a = stack.Reap(a, 60'000), status_b = stack.Reap(b, 60'000);
    log.Count("two movers racing on one run");
    log.Note("two movers racing on one run",
             absl::StrCat("exits ", status_a, " and ", status_b));
    m.raced += 2;
    move(0, 99, 3);
  }
  move(342, 441, 4);
  phase("race");

  // The paused leader: a run of s2's (683-1023 in the seeded map) that holds an account
  // moves to s3. Once s3's ledger holds the account (the copy is in), s2's sidecar is
  // stopped; the move flips without it, and it is continued after the flip.
  {
    uint32_t first = 683;
    for (const auto& [tenant, account] : accounts) {
      const uint32_t slot = SlotOf(tenant, "account", account);
      if (slot >= 683) {
        first = std::min<uint32_t>(slot, 1023 - 99);
        break;
      }
    }
    const uint32_t last = first + 99;
    std::vector<std::string> in_run;
    for (const auto& [tenant, account] : accounts) {
      const uint32_t slot = SlotOf(tenant, "account", account);
      if (slot >= first && slot <= last) in_run.push_back(account);
    }
    // A run that fails (a shard killed under it) is started again, up to 10 times, until
    // the copy is seen; polling each 5 ms, at most 30 s a run.
    auto s3 = ledger::v1::Ledger::NewStub(grpc::CreateChannel(
        stack.LedgerAddress(3), grpc::InsecureChannelCredentials()));
    pid_t run = -1;
    bool copied = false;
    for (int attempt = 0; attempt < 10 && !copied && !in_run.empty(); ++attempt) {
      run = stack.StartReshard(to_flags(first, last, 3));
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      int status = -2;  // still running
      while (!copied && status == -2 && std::chrono::steady_clock::now() < give_up) {
        for (const std::string& account : in_run) copied = copied || HeldBy(*s3, account);
        if (!copied) {
          status = stack.TryReap(run);
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
      }
      if (!copied && status == -2) stack.Reap(run, 0);
      if (!copied && status == 0) break;  // it finished between two looks
    }
    stack.Pause(2);
    log.Count("old owner's sidecar paused (SIGSTOP) across a flip");
    bool flipped = false;
    for (int i = 0; i < 150 && !flipped; ++i) {  // bounded: 30 s
      absl::StatusOr<SlotMap> map = stack.ReadMap();
      flipped = map.ok() && map->OwnerOf(first) == "s3";
      if (!flipped) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    // Paused at least as long as its lease, flip or not.
    std::this_thread::sleep_for(std::chrono::milliseconds(lease_ttl_ms));
    stack.Resume(2);
    stack.Reap(run, 60'000);
    log.Note("old owner's sidecar paused (SIGSTOP) across a flip",
             absl::StrCat("slots ", first, "-", last, ": paused ",
                          copied ? "after the copy" : "before seeing the copy",
                          flipped ? ", flipped while paused" : ", not flipped while paused"));
    move(first, last, 3);
  }
  phase("pause");

  // The partition: s1 cut off etcd for its lease and 4 s more, while the load goes on.
  absl::StatusOr<SlotMap> cut_map = stack.ReadMap();  // no move runs until the heal
  if (cut_map.ok()) map_at_cut = std::make_unique<SlotMap>(*cut_map);
  partition_from_ms = NowMs();
  stack.Partition(true);
  log.Count("sidecar partitioned from etcd (lease lapsed)");
  std::this_thread::sleep_for(std::chrono::milliseconds(lease_ttl_ms + 4000));
  partition_to_ms = NowMs();
  stack.Partition(false);
  phase("partition");

  // 5 -> 2: every run of s2, s3 and s4 goes to s0 or s1; the first by two racing movers.
  bool race = true;
  for (int leaving : {2, 3, 4}) {
    absl::StatusOr<SlotMap> map = stack.ReadMap();
    if (!map.ok()) {
      m.ok = false;
      break;
    }
    for (const v1::SlotRange& range : map->proto().ranges()) {
      if (range.shard() != absl::StrCat("s", leaving) || !m.ok) continue;
      const int to = static_cast<int>(range.first() % 2);
      if (race) {
        race = false;
        const std::vector<std::string> flags = to_flags(range.first(), range.last(), to);
        pid_t a = stack.StartReshard(flags), b = stack.StartReshard(flags);
        stack.Reap(a, 60'000);
        stack.Reap(b, 60'000);
        log.Count("two movers racing on one run");
        m.raced += 2;
      }
      move(range.first(), range.last(), to);
    }
  }
  phase("shrink");
  for (int i : {2, 3, 4}) m.ok = stack.StopShard(i) && m.ok;
  phase("stop");
}

// `control`: the negative control, whose sidecars leave the accounts behind.
void RunOnce(uint64_t seed, bool control) {
  SCOPED_TRACE(absl::StrCat("seed ", seed, control ? " (negative control)" : ""));
  FaultLog log;
  ChaosOptions options;
  options.seed = seed;
  options.move_business_data = !control;
  ChaosStack stack(FreshDir(absl::StrCat("chaos", seed)), options, log);
  ASSERT_TRUE(stack.Start().ok()) << "logs in " << stack.dir();

  const std::vector<std::string>& tenants = stack.tenants();
  std::vector<std::unique_ptr<LoadClient>> loads;
  std::atomic<int> loading{static_cast<int>(tenants.size())};
  std::atomic<bool> moving{true};
  std::atomic<int64_t> not_enqueued{0};
  std::vector<int> rounds(tenants.size(), 0);
  std::unique_ptr<std::atomic<int>[]> rounds_done(new std::atomic<int>[tenants.size()]);
  for (size_t t = 0; t < tenants.size(); ++t) rounds_done[t] = 0;
  std::vector<std::thread> producers;
  for (size_t t = 0; t < tenants.size(); ++t) {
    loads.push_back(std::make_unique<LoadClient>(stack.AgentAddress(static_cast<int>(t)),
                                                 AccountPrefix(tenants[t])));
    producers.emplace_back([&, t] {
      // Each round opens the accounts again (duplicates of the same commands) and adds
      // new transfers.
      for (int& r = rounds[t]; r < kMaxRounds && (r == 0 || moving); ++r) {
        not_enqueued += loads[t]->Run(kAccounts, kInitial, kTransfersPerRound, /*threads=*/2,
                                      seed * 1000 + r * 10 + t, 60'000, absl::StrCat("t", r, "-"));
        rounds_done[t] = r + 1;
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
      }
      loading--;
    });
  }

  Moves moves;
  int64_t partition_from_ms = 0, partition_to_ms = 0;
  std::unique_ptr<SlotMap> map_at_cut;
  std::thread mover([&] {
    std::mt19937_64 rng(seed * 7 + 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    std::vector<std::pair<std::string, std::string>> accounts;  // (tenant, id)
    for (const std::string& tenant : tenants) {
      for (int a = 0; a < kAccounts; ++a) {
        accounts.emplace_back(tenant, absl::StrCat(AccountPrefix(tenant), a));
      }
    }
    Move(stack, log, rng, accounts, moves, partition_from_ms, partition_to_ms, map_at_cut,
         options.lease_ttl_ms);
    moving = false;
  });

  // Duplicates around the agent: finished commands sent again to a random shard.
  std::map<std::string, int> resent;
  std::thread duplicates([&] {
    std::mt19937_64 rng(seed * 13 + 5);
    for (int round = 0; round < 2000 && (loading > 0 || moving); ++round) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      const int t = static_cast<int>(rng() % tenants.size());
      for (const v1::Command& c : SomeFinished(stack.AgentAddress(t), rounds_done[t], rng)) {
        const int shard = static_cast<int>(rng() % kChaosShards);
        resent[SubmitAgain(stack.SidecarAddress(shard), tenants[t], c)]++;
      }
    }
  });

  std::mt19937_64 rng(seed);
  absl::Status restart_failure;
  const auto stop_at = std::chrono::steady_clock::now() + std::chrono::minutes(5);
  for (int k = 0; k < 2000 && (loading > 0 || moving) && std::chrono::steady_clock::now() < stop_at;
       ++k) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250 + rng() % 401));
    absl::StatusOr<std::string> kind = stack.KillOne(rng);
    if (!kind.ok()) {
      restart_failure = kind.status();
      break;
    }
    if (!kind->empty()) log.Count(*kind + " killed (SIGKILL), restarted");
  }
  for (auto& p : producers) p.join();
  mover.join();
  duplicates.join();
  ASSERT_TRUE(restart_failure.ok()) << restart_failure << " (logs in " << stack.dir() << ")";
  EXPECT_TRUE(moves.ok) << "a move never finished (logs in " << stack.dir() << ")";
  EXPECT_EQ(not_enqueued, 0);
  int64_t duplicates_sent = 0;
  for (const auto& [answer, n] : resent) duplicates_sent += n;
  log.Count("finished command sent again to a random shard", static_cast<int>(duplicates_sent));
  std::string answers;
  for (const auto& [answer, n] : resent) absl::StrAppend(&answers, answer, "=", n, " ");
  log.Note("finished command sent again to a random shard", answers);

  absl::StatusOr<SlotMap> final_map = stack.ReadMap();
  ASSERT_TRUE(final_map.ok()) << final_map.status();
  EXPECT_EQ(final_map->WritableSlotsOf("s0") + final_map->WritableSlotsOf("s1"), kSlotCount);
  EXPECT_TRUE(final_map->proto().migrations().empty());

  // Quiet: no agent or relay waiting, no credit left in a ledger's outbox (bounded).
  for (int i : {2, 3, 4}) EXPECT_TRUE(stack.ReopenLedger(i).ok());
  bool quiet = false;
  for (int round = 0; round < 900 && !quiet; ++round) {  // at most 3 minutes
    quiet = true;
    for (size_t t = 0; t < tenants.size(); ++t) {
      quiet = quiet && Waiting(stack.AgentAddress(static_cast<int>(t))) == 0;
      for (int i : {0, 1}) quiet = quiet && Waiting(stack.RelayAddress(i, static_cast<int>(t))) == 0;
    }
    for (int i = 0; i < kChaosShards; ++i) quiet = quiet && stack.PendingFollowUps(i) == 0;
    if (!quiet) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  EXPECT_TRUE(quiet) << "commands still in flight";

  std::vector<TenantLoad> tenant_loads;
  std::vector<std::string> accounts;
  for (size_t t = 0; t < tenants.size(); ++t) {
    TenantLoad load;
    load.tenant = tenants[t];
    load.acked = loads[t]->acked();
    auto agent = v1::Agent::NewStub(grpc::CreateChannel(stack.AgentAddress(static_cast<int>(t)),
                                                         grpc::InsecureChannelCredentials()));
    auto records = AllRecords(*agent);
    ASSERT_TRUE(records.ok()) << records.status();
    load.records = std::move(*records);
    for (int a = 0; a < kAccounts; ++a) {
      load.accounts.push_back(absl::StrCat(AccountPrefix(tenants[t]), a));
      accounts.push_back(load.accounts.back());
    }
    tenant_loads.push_back(std::move(load));
  }
  std::vector<ShardReading> shards;
  for (int i = 0; i < kChaosShards; ++i) {
    absl::StatusOr<ShardReading> reading =
        ReadShard(absl::StrCat("s", i), stack.LedgerAddress(i), accounts);
    ASSERT_TRUE(reading.ok()) << reading.status();
    shards.push_back(std::move(*reading));
  }
  ChaosVerdict verdict = CheckChaos(tenant_loads, shards, *final_map);
  // s1 cannot know it holds its lease from the lease's length after the cut (plus the
  // longest forward and a margin) until the heal: nothing may be applied through it then.
  const int64_t lapsed_ms = partition_from_ms + options.lease_ttl_ms + 2000;
  int cut_off = -1;
  if (map_at_cut != nullptr) {
    cut_off = EffectsOfSlotsBetween(shards, *map_at_cut, absl::StrCat("s", kPartitionedShard), lapsed_ms, partition_to_ms);
    log.Note("sidecar partitioned from etcd (lease lapsed)",
             absl::StrCat(
                 EffectsOfSlotsBetween(shards, *map_at_cut, absl::StrCat("s", kPartitionedShard), partition_from_ms - 3000, partition_from_ms),
                 " effects of its slots in the 3 s before the cut, ", cut_off,
                 " while cut off past its lease, ",
                 EffectsOfSlotsBetween(shards, *map_at_cut, absl::StrCat("s", kPartitionedShard), partition_to_ms, partition_to_ms + 3000),
                 " in the 3 s after the heal"));
  }
  EXPECT_NE(map_at_cut, nullptr) << "the map at the cut could not be read";

  // Every line starts "chaos run", so that ./eonce faults shows the tables.
  const std::string tag = absl::StrCat("chaos run seed=", seed, " | ");
  std::printf("%smoves=%d movers_killed=%d racing_movers=%d phases: %s\n", tag.c_str(),
              moves.moves, moves.killed_runs, moves.raced, moves.timings.c_str());
  for (const std::string& table : {log.Table(), verdict.Table()}) {
    for (absl::string_view line : absl::StrSplit(table, '\n', absl::SkipEmpty())) {
      std::printf("%s%s\n", tag.c_str(), std::string(line).c_str());
    }
  }
  std::fflush(stdout);
  if (control) {
    // Accounts stay where they were opened: the checker must say so.
    int misplaced = 0;
    for (const TenantVerdict& t : verdict.tenants) misplaced += t.misplaced;
    EXPECT_GT(misplaced, 0);
    EXPECT_FALSE(verdict.ok());
    return;
  }
  EXPECT_TRUE(verdict.ok()) << verdict.Table() << " (logs in " << stack.dir() << ")";
  EXPECT_EQ(cut_off, 0) << "s1 applied commands while cut off from etcd";
  for (size_t i = 0; i < verdict.tenants.size(); ++i) {
    const TenantVerdict& t = verdict.tenants[i];
    EXPECT_EQ(t.acked, kAccounts + rounds[i] * kTransfersPerRound) << t.tenant;
    EXPECT_EQ(t.minted, kAccounts * kInitial) << t.tenant;
    EXPECT_GT(t.credits, 0) << t.tenant << ": no transfer crossed shards";
  }
  if (::testing::Test::HasFailure()) KeepLogs(stack.dir());
}

class ChaosTest : public ::testing::TestWithParam<int> {};

TEST_P(ChaosTest, ShardsOnEtcdUnderKillsPausesPartitionsAndRacingMoversApplyEachCommandOnce) {
  const int runs = EnvInt("EONCE_KILL_RUNS", 1);
  for (int run = 0; run < runs && !HasFailure(); ++run) {
    RunOnce(static_cast<uint64_t>(GetParam()) + 100 * run, /*control=*/false);
  }
}

INSTANTIATE_TEST_SUITE_P(Seeds, ChaosTest, ::testing::Values(1),
                         [](const auto& info) { return absl::StrCat("seed", info.param); });

// The same chaos with sidecars that do not move the business's data: caught.
TEST(ChaosNegativeControl, AccountsLeftBehindByTheMovesAreCaught) {
  RunOnce(2, /*control=*/true);
}

}  // namespace
}  // namespace eonce::testing
