// The bench's reading of the machine's stolen CPU time (/proc/stat), which it prints
// beside every row: a VM's limits and rates fall with it.
#include "bench/loops.h"

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

}  // namespace
}  // namespace eonce::bench
