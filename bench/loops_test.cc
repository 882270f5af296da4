// The bench's reading of the machine's stolen CPU time (/proc/stat), which it prints
// beside every row: a VM's limits and rates fall with it; the context switches per
// operation; and the pairs of MeasurePaired.
#include "bench/loops.h"

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace eonce::bench {
namespace {

TEST(MachineTicksTest, AreReadFromTheCpuLineOfProcStat) {
  // user nice system idle iowait irq softirq steal guest guest_nice
  MachineTicks ticks = ParseMachineTicks("cpu  100 5 40 800 20 3 2 30 7 0");
  EXPECT_EQ(ticks.total, 1000u);  // the first eight; guest time is inside user
  EXPECT_EQ(ticks.steal, 30u);
}

TEST(MachineTicksTest, ALineThatIsNotTheCpuLineGivesNothing) {
  EXPECT_EQ(ParseMachineTicks("cpu0 100 5 40 800 20 3 2 30").total, 0u);
  EXPECT_EQ(ParseMachineTicks("cpu  100 5 40").total, 0u);  // an old kernel: no steal
  EXPECT_EQ(ParseMachineTicks("").total, 0u);
}

TEST(MachineTicksTest, TheStolenShareIsOfTheTimeBetweenTwoReadings) {
  MachineTicks before = ParseMachineTicks("cpu  100 0 0 800 0 0 0 100");
  MachineTicks after = ParseMachineTicks("cpu  300 0 0 1000 0 0 0 200");
  EXPECT_DOUBLE_EQ(StealPct(before, after), 20.0);  // 100 of 500 ticks
  EXPECT_DOUBLE_EQ(StealPct(before, before), 0.0);  // no time passed
  EXPECT_DOUBLE_EQ(StealPct(before, MachineTicks()), 0.0);  // an unreadable second reading
}

TEST(MachineTicksTest, ThisMachineCountsItsTime) {
  MachineTicks ticks = ReadMachineTicks();
  EXPECT_GT(ticks.total, 0u);
  EXPECT_LE(ticks.steal, ticks.total);
}

// A call that ends a millisecond later, on a thread of its own.
void EndsSoon(int64_t /*i*/, std::function<void(bool)> done) {
  std::thread([done = std::move(done)] {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    done(true);
  }).detach();
}

// Context switches per operation count hand-offs: an operation that sleeps gives up its
// CPU each time, one that only computes almost never does.
TEST(SwitchesTest, AnOperationThatSleepsSwitchesAndOneThatComputesDoesNot) {
  Figures sleeping = Threads(1, 0.2, [](int64_t) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    return true;
  });
  ASSERT_GT(sleeping.ops, 50);
  EXPECT_GE(sleeping.switches_per_op, 0.9);
  volatile uint64_t sink = 0;
  Figures computing = Threads(1, 0.2, [&sink](int64_t i) {
    for (int k = 0; k < 1000; ++k) sink = sink + static_cast<uint64_t>(i * k);
    return true;
  });
  ASSERT_GT(computing.ops, 1000);
  EXPECT_LT(computing.switches_per_op, 0.1);
}

TEST(MeasurePairedTest, EachRunOfThePathFollowsOneOfItsLimitAndOneOfItsReference) {
  MeasureOptions options;
  options.warmup_seconds = 0.01;
  options.seconds = 0.02;
  options.runs = 3;
  std::vector<std::string> order;
  // The limit runs at twice the reference's rate, so every ratio to the reference is twice
  // the ratio to the limit of the same run.
  auto fixed = [&order](const char* name, double rate) -> LimitRunFn {
    return [&order, name, rate](int64_t first) {
      order.push_back(name + std::to_string(first / kRunStride));
      Figures f;
      f.ops_per_s = rate;
      return f;
    };
  };
  Figures f = MeasurePaired(options, 1, EndsSoon, fixed("limit", 1000), nullptr,
                            fixed("reference", 500));
  EXPECT_EQ(order, (std::vector<std::string>{"limit1", "reference1", "limit2", "reference2",
                                             "limit3", "reference3"}));
  ASSERT_GT(f.paired_ratio, 0);
  EXPECT_DOUBLE_EQ(f.paired_reference_ratio, 2 * f.paired_ratio);
  EXPECT_DOUBLE_EQ(f.paired_limit_ops_per_s, 1000);
}

TEST(MeasurePairedTest, WithoutAReferenceThereIsNoReferenceRatio) {
  MeasureOptions options;
  options.warmup_seconds = 0.01;
  options.seconds = 0.02;
  options.runs = 1;
  Figures f = MeasurePaired(options, 1, EndsSoon, [](int64_t) {
    Figures limit;
    limit.ops_per_s = 1000;
    return limit;
  });
  EXPECT_GT(f.paired_ratio, 0);
  EXPECT_EQ(f.paired_reference_ratio, 0);
}

}  // namespace
}  // namespace eonce::bench
