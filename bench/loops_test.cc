// The bench's reading of the machine's stolen CPU time (/proc/stat), which it prints
// beside every row: a VM's limits and rates fall with it; the context switches per
// operation; and the pairs of MeasurePaired.
#include "bench/loops.h"

#include <unistd.h>

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

// The idle sidecar's CPU is read from /proc/<pid>/stat: user and system time are fields
// 14 and 15, counted after the command name, which may hold spaces and parentheses.
TEST(ProcessCpuTicksTest, AreUserPlusSystemTimeAfterTheCommandName) {
  EXPECT_EQ(ParseProcessCpuTicks("1234 (dedupe_sidecar) S 1 1234 1234 0 -1 4194560 2000 0 0 0 "
                                 "37 12 0 0 20 0 9 0 100 1000 500"),
            49);
  // A name with ") " inside it does not shift the fields.
  EXPECT_EQ(ParseProcessCpuTicks("99 (a) b (c) S 1 99 99 0 -1 0 0 0 0 0 5 7 0 0 20 0 1 0 1"), 12);
  EXPECT_EQ(ParseProcessCpuTicks("99 (short) S 1 99"), -1);
  EXPECT_EQ(ParseProcessCpuTicks(""), -1);
}

TEST(ProcessCpuTicksTest, ThisProcessCountsItsTime) {
  volatile uint64_t sink = 0;
  for (int k = 0; k < 50'000'000; ++k) sink = sink + k;  // some CPU time of its own
  EXPECT_GT(ReadProcessCpuTicks(getpid()), 0);
  EXPECT_EQ(ReadProcessCpuTicks(-1), -1);
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

// The peers' pairs report their spread: the least and the most of the pairs' ratios, and
// the reference's median rate.
TEST(MeasurePairedTest, ThePairsGiveTheirLeastAndMostRatio) {
  MeasureOptions options;
  options.warmup_seconds = 0.01;
  options.seconds = 0.02;
  options.runs = 3;
  // Each pair's limit runs at a rate of its own (1000, 16000, 4000), the reference at 500.
  const std::vector<double> limit_rates = {1000, 16000, 4000};
  int pair = 0;
  Figures f = MeasurePaired(options, 1, EndsSoon, [&](int64_t) {
    Figures limit;
    limit.ops_per_s = limit_rates[pair++ % limit_rates.size()];
    return limit;
  }, nullptr, [](int64_t) {
    Figures reference;
    reference.ops_per_s = 500;
    return reference;
  });
  ASSERT_GT(f.paired_ratio_max, 0);
  EXPECT_LE(f.paired_ratio_min, f.paired_ratio);
  EXPECT_LE(f.paired_ratio, f.paired_ratio_max);
  // The path's rate is about the same in each run, so the limit of 1000 gives the most and
  // that of 16000 the least: about 16 times apart (the median is 4 times below the most).
  EXPECT_GT(f.paired_ratio_max / f.paired_ratio_min, 8.0);
  EXPECT_LE(f.paired_reference_ratio_min, f.paired_reference_ratio);
  EXPECT_LE(f.paired_reference_ratio, f.paired_reference_ratio_max);
  EXPECT_GT(f.paired_reference_ratio_min, 0);
  EXPECT_DOUBLE_EQ(f.paired_reference_ops_per_s, 500);
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
