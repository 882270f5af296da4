// kill -9 under load, with the real binaries. A load client enqueues 5,000 commands (40
// account openings, then transfers) through the agent, while every 50-500 ms a random
// component (the agent, the sidecar or the ledger service) is killed with SIGKILL and
// started again on the same data. Then the kills stop, and once the agent has nothing
// waiting the verdict comes from the ledger's effect ledger: every acknowledged command
// is final, none is lost, none has two effects, and the money is conserved.
//
// CI runs four seeds (one per Bazel shard), the fourth in front of a ledger without an
// inbox; EONCE_KILL_RUNS=N (bazel test --test_env, or ./eonce faults N) runs N seeds each,
// and EONCE_KILL_COMMANDS changes the load.
#include <chrono>
#include <cstdlib>
#include <random>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/faults/stack.h"
#include "tests/util/temp_dir.h"

namespace eonce::testing {
namespace {

int EnvInt(const char* name, int fallback) {
  const char* value = std::getenv(name);
  int parsed = 0;
  return value != nullptr && absl::SimpleAtoi(value, &parsed) && parsed > 0 ? parsed : fallback;
}

// With `legacy`, the ledger keeps no inbox: a second forward of a command would be a
// second effect, so the effect ledger shows any double forward by the sidecar. Unknown
// outcomes are parked there; the test then acts as the operator (ResolveParked, with the
// effect ledger as the truth) until nothing waits.
void RunOnce(uint64_t seed, int commands, bool legacy) {
  SCOPED_TRACE(absl::StrCat("seed ", seed, legacy ? " (legacy ledger)" : ""));
  StackOptions options;
  options.seed = seed;
  options.legacy_ledger = legacy;
  if (legacy) options.agent_args = {"--parked_recheck_ms=300"};
  auto stack = FaultStack::Start(FreshDir(absl::StrCat("kill", seed)), options);
  ASSERT_TRUE(stack.ok()) << stack.status();
  FaultStack& s = **stack;

  constexpr int kAccounts = 40;
  LoadClient load(s.agent_address());
  std::atomic<bool> loading{true};
  int64_t not_enqueued = 0;
  std::thread producer([&] {
    not_enqueued = load.Run(kAccounts, 1000, commands - kAccounts, /*threads=*/4, seed);
    loading.store(false);
  });

  std::mt19937_64 rng(seed);
  std::map<Component, int> kills;
  absl::Status restart_failure;
  // Bounded: at most 2,000 kills, and none after the load is in (or 5 minutes).
  auto stop_at = std::chrono::steady_clock::now() + std::chrono::minutes(5);
  for (int k = 0; k < 2000 && loading.load() && std::chrono::steady_clock::now() < stop_at; ++k) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50 + rng() % 451));
    Component victim = static_cast<Component>(rng() % 3);
    kills[victim]++;
    if (absl::Status st = s.KillAndRestart(victim); !st.ok()) {
      restart_failure = st;
      break;
    }
  }
  producer.join();
  ASSERT_TRUE(restart_failure.ok()) << restart_failure << " (logs in " << s.dir() << ")";
  EXPECT_EQ(not_enqueued, 0);
  EXPECT_GT(kills[Component::kAgent] + kills[Component::kSidecar] + kills[Component::kLedger], 0);

  int resolved = 0;
  if (legacy) {
    // Bounded: at most 240 rounds of 500 ms.
    for (int round = 0; round < 240; ++round) {
      resolved += ResolveParkedFromTheLedger(s.process(Component::kSidecar).address(),
                                             s.process(Component::kLedger).address());
      if (Waiting(s.process(Component::kAgent).address()) == 0) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
  }

  Verdict v = WaitAndCheck(s.process(Component::kAgent).address(),
                           s.process(Component::kLedger).address(), load.acked(),
                           /*timeout_ms=*/180'000);
  std::printf("kill run seed=%lu commands=%d%s kills: agent=%d sidecar=%d ledger=%d "
              "parked_resolved=%d | %s\n",
              static_cast<unsigned long>(seed), commands, legacy ? " legacy" : "",
              kills[Component::kAgent], kills[Component::kSidecar], kills[Component::kLedger],
              resolved, v.ToString().c_str());
  EXPECT_EQ(v.acked, commands);
  EXPECT_TRUE(v.ok()) << v.ToString() << " (logs in " << s.dir() << ")";
  if (!v.ok()) KeepLogs(s.dir());
  EXPECT_EQ(v.minted, kAccounts * 1000);
}

// (seed, legacy ledger)
class KillTest : public ::testing::TestWithParam<std::pair<int, bool>> {};

TEST_P(KillTest, EveryCommandTakesEffectOnceWhileComponentsAreKilled) {
  const int runs = EnvInt("EONCE_KILL_RUNS", 1);
  const int commands = EnvInt("EONCE_KILL_COMMANDS", 5000);
  for (int run = 0; run < runs; ++run) {
    RunOnce(static_cast<uint64_t>(GetParam().first + 100 * run), commands, GetParam().second);
    if (::testing::Test::HasFailure()) break;
  }
}

// Three seeds in front of the inbox ledger, one in front of the legacy ledger.
INSTANTIATE_TEST_SUITE_P(Seeds, KillTest,
                         ::testing::Values(std::make_pair(1, false), std::make_pair(2, false),
                                           std::make_pair(3, false), std::make_pair(4, true)),
                         [](const auto& info) {
                           return absl::StrCat("seed", info.param.first,
                                               info.param.second ? "_legacy" : "");
                         });

}  // namespace
}  // namespace eonce::testing
