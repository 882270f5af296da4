// The simulation as tests: determinism, 2,000 seeds spread over every fault point with no
// violation, and the negative controls that prove the checker can fail.
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

CampaignReport Campaign(uint64_t first, int64_t seeds, SimOptions base = {}) {
  CampaignOptions options;
  options.first_seed = first;
  options.seeds = seeds;
  options.work_dir = WorkDir();
  options.base = base;
  CampaignReport report = RunCampaign(options);
  std::printf("%s", report.text.c_str());
  std::fflush(stdout);
  return report;
}

TEST(SimTest, TheSameSeedGivesTheSameTrace) {
  SimOptions options;
  options.work_dir = WorkDir();
  for (uint64_t seed : {3u, 17u, 42u}) {
    options.seed = seed;
    SimResult first = RunSeed(options);
    SimResult second = RunSeed(options);
    EXPECT_EQ(first.trace_hash, second.trace_hash) << "seed " << seed;
    EXPECT_EQ(first.events, second.events) << "seed " << seed;
    EXPECT_EQ(first.fired, second.fired) << "seed " << seed;
  }
  options.seed = 3;
  SimResult a = RunSeed(options);
  options.seed = 4;
  SimResult b = RunSeed(options);
  EXPECT_NE(a.trace_hash, b.trace_hash);
}

// 2,000 seeds in eight slices, so that test sharding spreads them over the cores.
class SimCampaignTest : public ::testing::TestWithParam<int> {};

TEST_P(SimCampaignTest, NoViolation) {
  constexpr int64_t kSeedsPerSlice = 250;
  CampaignReport report = Campaign(1 + GetParam() * kSeedsPerSlice, kSeedsPerSlice);
  EXPECT_EQ(report.violations, 0) << "first failing seed " << report.first_failing_seed
                                  << "; replay with " << ReplayCommand(report.first_failing_seed);
  // Every fault point must have fired somewhere in the slice.
  for (int p = 0; p < kFaultPoints; ++p) {
    EXPECT_GT(report.fired[p], 0) << FaultPointName(static_cast<FaultPoint>(p));
  }
}

INSTANTIATE_TEST_SUITE_P(Slices, SimCampaignTest, ::testing::Range(0, 8));

TEST(SimTest, HarshWorldStillHasNoViolation) {
  SimOptions harsh;
  harsh.harsh = true;
  CampaignReport report = Campaign(100'001, 100, harsh);
  EXPECT_EQ(report.violations, 0) << "first failing seed " << report.first_failing_seed;
}

TEST(SimTest, NegativeControlWithoutSidecarDedupeIsCaught) {
  SimOptions broken;
  broken.harsh = true;
  broken.disable_sidecar_dedupe = true;
  CampaignReport report = Campaign(1, 10, broken);
  EXPECT_GT(report.violations, 0) << "the checker missed duplicate effects";
}

// Runs `broken` (behind an inbox business) with seed 1 and 2, and expects the checker to
// report forwards made again without proof in each.
void ExpectDoubleForwards(SimOptions broken, const char* missed) {
  broken.inbox_business = true;
  for (uint64_t seed = 1; seed <= 2; ++seed) {
    broken.seed = seed;
    SimResult result = RunSeed(broken);
    ASSERT_FALSE(result.legacy);
    int double_forwards = 0;
    for (const std::string& v : result.violations) {
      double_forwards += v.find("forwarded again without proof") != std::string::npos;
    }
    EXPECT_GT(double_forwards, 0) << "seed " << seed << ": the checker missed " << missed;
  }
}

// Behind an inbox no second effect happens, so only the check on what the business was
// sent can see a sidecar that forwards duplicates.
TEST(SimTest, NegativeControlWithoutSidecarDedupeIsCaughtBehindAnInbox) {
  SimOptions broken;
  broken.disable_sidecar_dedupe = true;
  ExpectDoubleForwards(broken, "double forwards");
}

// For an inbox-keeping business a first attempt is claimed in memory, not written: claims
// that hold nothing let duplicates through while the original is in flight.
TEST(SimTest, NegativeControlWithForgetfulClaimsIsCaught) {
  SimOptions broken;
  broken.forgetful_claims = true;
  ExpectDoubleForwards(broken, "duplicates forwarded in flight");
}

TEST(SimTest, NegativeControlWithLateCommandIdsIsCaught) {
  SimOptions broken;
  broken.harsh = true;
  broken.late_ids = true;
  CampaignReport report = Campaign(1, 10, broken);
  EXPECT_GT(report.violations, 0) << "the checker missed intents stored twice";
}

// The sidecar skips its fsyncs only for a business whose inbox is the commit point; a
// legacy business that claims one loses forwards a restarted sidecar forgot.
TEST(SimTest, NegativeControlWithALegacyBusinessClaimingAnInboxIsCaught) {
  SimOptions broken;
  broken.harsh = true;
  broken.legacy_claims_inbox = true;
  CampaignReport report = Campaign(1, 10, broken);
  EXPECT_GT(report.violations, 0) << "the checker missed forwards a restart forgot";
}

// The sharded worlds have their own target (sharded_sim_test.cc).

TEST(SimTest, NegativeControlWithUnsyncedEnqueueIsCaught) {
  SimOptions broken;
  broken.harsh = true;
  broken.unsynced_enqueue = true;
  CampaignReport report = Campaign(1, 10, broken);
  EXPECT_GT(report.violations, 0) << "the checker missed lost commands";
}

}  // namespace
}  // namespace eonce::sim
