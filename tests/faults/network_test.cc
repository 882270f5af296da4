// Network faults on every hop, with the real binaries: a FaultProxy between the producer
// and the agent, the agent and the sidecar, and the sidecar and the ledger. Responses are
// lost after their requests were delivered, every chunk is delayed, and each hop is cut
// off (blackholed) for a while during the load. Once the proxies heal, everything must
// converge: every acknowledged command final, none lost, none applied twice, the money
// conserved.
#include <chrono>
#include <thread>

#include "gtest/gtest.h"
#include "tests/faults/stack.h"
#include "tests/util/temp_dir.h"

namespace eonce::testing {
namespace {

constexpr Component kHops[] = {Component::kAgent, Component::kSidecar, Component::kLedger};

TEST(NetworkTest, LostResponsesDelaysAndPartitionsConvergeOnceHealed) {
  StackOptions options;
  options.proxies = true;
  options.seed = 7;
  auto stack = FaultStack::Start(FreshDir("network"), options);
  ASSERT_TRUE(stack.ok()) << stack.status();
  FaultStack& s = **stack;
  for (Component hop : kHops) {
    s.proxy_to(hop)->SetLoseResponseRatio(0.1);
    s.proxy_to(hop)->SetDelayMs(1);
  }

  constexpr int kAccounts = 20, kTransfers = 600;
  LoadClient load(s.agent_address());
  std::atomic<bool> loading{true};
  int64_t not_enqueued = 0;
  std::thread producer([&] {
    not_enqueued = load.Run(kAccounts, 1000, kTransfers, /*threads=*/4, /*seed=*/7);
    loading.store(false);
  });
  // Each hop in turn is cut off for 1.5 s, while the load goes on.
  for (int round = 0; round < 3 && loading.load(); ++round) {
    for (Component hop : {Component::kLedger, Component::kSidecar, Component::kAgent}) {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      s.proxy_to(hop)->SetBlackhole(true);
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      s.proxy_to(hop)->SetBlackhole(false);
    }
  }
  producer.join();
  EXPECT_EQ(not_enqueued, 0);
  for (Component hop : kHops) s.proxy_to(hop)->Heal();

  Verdict v = WaitAndCheck(s.process(Component::kAgent).address(),
                           s.process(Component::kLedger).address(), load.acked(), 120'000);
  std::printf("network run: responses lost to agent=%ld sidecar=%ld ledger=%ld | %s\n",
              static_cast<long>(s.proxy_to(Component::kAgent)->responses_lost()),
              static_cast<long>(s.proxy_to(Component::kSidecar)->responses_lost()),
              static_cast<long>(s.proxy_to(Component::kLedger)->responses_lost()),
              v.ToString().c_str());
  EXPECT_EQ(v.acked, kAccounts + kTransfers);
  EXPECT_TRUE(v.ok()) << v.ToString() << " (logs in " << s.dir() << ")";
  // The faults did happen on every hop.
  for (Component hop : kHops) {
    EXPECT_GT(s.proxy_to(hop)->responses_lost(), 0) << ComponentName(hop);
  }
}

}  // namespace
}  // namespace eonce::testing
