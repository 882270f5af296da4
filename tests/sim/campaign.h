// A campaign: many seeds, a report of seeds per second, how often each fault point fired,
// and every violation with the command that replays its seed.
#ifndef EONCE_TESTS_SIM_CAMPAIGN_H_
#define EONCE_TESTS_SIM_CAMPAIGN_H_

#include <array>
#include <cstdint>
#include <string>

#include "tests/sim/sim.h"

namespace eonce::sim {

struct CampaignOptions {
  uint64_t first_seed = 1;
  int64_t seeds = 100;
  std::string work_dir = "/tmp";
  bool trace = false;
  // Negative controls and harsh mode, passed to every run.
  SimOptions base;
};

struct CampaignReport {
  int64_t seeds = 0;
  int64_t violations = 0;
  int64_t failing_seeds = 0;
  uint64_t first_failing_seed = 0;
  std::array<int64_t, kFaultPoints> fired{};
  int64_t crashes = 0;
  int64_t legacy_runs = 0;
  int64_t max_settle_ms = 0;
  int64_t moves = 0;          // slot moves finished (sharded worlds)
  int64_t move_attempts = 0;  // runs of the mover they took
  int64_t aborted_moves = 0;
  int64_t fenced = 0;      // writes a business's fence refused
  int64_t not_leased = 0;  // commands refused by a sidecar without its lease
  int64_t credits = 0;     // follow-ups relayed
  double seconds = 0;
  std::string text;
};

CampaignReport RunCampaign(const CampaignOptions& options);

}  // namespace eonce::sim

#endif  // EONCE_TESTS_SIM_CAMPAIGN_H_
