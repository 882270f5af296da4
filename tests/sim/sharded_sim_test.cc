// The sharded simulation as tests: two shards, each a sidecar in front of its own ledger,
// coordinated through a map store with shard leases; slot moves during the faults (rival
// movers, aborts at every step, a shard down at the flip), a sidecar cut off from the
// store, late forwards, slow disks and skewed clocks. 2,000 seeds with no violation (every
// command one effect, nothing lost, every tenant's books whole over all shards), and the
// negative controls that prove the checker fails without the protocol's two guards.
#include <cstdio>
#include <cstdlib>

#include "gtest/gtest.h"
#include "tests/sim/campaign.h"
#include "tests/sim/sim.h"

namespace eonce::sim {
namespace {

std::string WorkDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

CampaignReport Campaign(uint64_t first, int64_t seeds, SimOptions base) {
  CampaignOptions options;
  options.first_seed = first;
  options.seeds = seeds;
  options.work_dir = WorkDir();
  base.shards = true;
  options.base = base;
  CampaignReport report = RunCampaign(options);
  std::printf("%s", report.text.c_str());
  std::fflush(stdout);
  return report;
}

TEST(ShardedSimTest, TheSameSeedGivesTheSameTrace) {
  SimOptions options;
  options.shards = true;
  options.work_dir = WorkDir();
  for (uint64_t seed : {200'003u, 200'017u}) {
    options.seed = seed;
    SimResult first = RunSeed(options);
    SimResult second = RunSeed(options);
    EXPECT_EQ(first.trace_hash, second.trace_hash) << "seed " << seed;
    EXPECT_EQ(first.events, second.events) << "seed " << seed;
  }
}

// 2,000 seeds in eight slices, so that test sharding spreads them over the cores.
class ShardedCampaignTest : public ::testing::TestWithParam<int> {};

TEST_P(ShardedCampaignTest, NoViolation) {
  constexpr int64_t kSeedsPerSlice = 250;
  CampaignReport report = Campaign(200'001 + GetParam() * kSeedsPerSlice, kSeedsPerSlice, {});
  EXPECT_EQ(report.violations, 0) << "first failing seed " << report.first_failing_seed
                                  << "; replay with "
                                  << ReplayCommand(report.first_failing_seed, /*shards=*/true);
  // Every fault of the sharded world met in each slice.
  EXPECT_GT(report.moves, 0);
  EXPECT_GT(report.move_attempts, report.moves) << "no move was ever interrupted and resumed";
  EXPECT_GT(report.aborted_moves, 0);
  EXPECT_GT(report.credits, 0);
  EXPECT_GT(report.fenced, 0) << "no late write ever met a fence";
  EXPECT_GT(report.not_leased, 0) << "no sidecar ever went without its lease";
}

INSTANTIATE_TEST_SUITE_P(Slices, ShardedCampaignTest, ::testing::Range(0, 8));

TEST(ShardedSimTest, HarshShardedWorldHasNoViolation) {
  SimOptions harsh;
  harsh.harsh = true;
  CampaignReport report = Campaign(300'001, 60, harsh);
  EXPECT_EQ(report.violations, 0) << "first failing seed " << report.first_failing_seed;
}

// A business that applies a forward whatever epoch it carries takes a former owner's late
// write after the slot's data left: an effect on the old shard's copy, which the move then
// drops, or a second effect of a command the new owner also applied.
TEST(ShardedSimTest, NegativeControlWithoutTheBusinessFenceIsCaught) {
  SimOptions broken;
  broken.harsh = true;
  broken.no_business_fence = true;
  CampaignReport report = Campaign(400'001, 100, broken);
  EXPECT_GT(report.violations, 0) << "the checker missed writes past the fence";
}

// A map store whose compare-and-swap ignores the expected epoch lets a stale mover write
// over a newer map (an abort over a flip, a copy's epoch over another's): the map forks.
TEST(ShardedSimTest, NegativeControlWithACompareAndSwapThatIgnoresTheEpochIsCaught) {
  SimOptions broken;
  broken.harsh = true;
  broken.cas_ignores_epoch = true;
  CampaignReport report = Campaign(500'001, 60, broken);
  EXPECT_GT(report.violations, 0) << "the checker missed a forked map";
}

}  // namespace
}  // namespace eonce::sim
