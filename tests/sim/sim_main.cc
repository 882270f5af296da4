// The simulation's command line: ./eonce sim --seeds N (a campaign) or --seed S (replay).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <algorithm>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "common/base/flags.h"
#include "tests/sim/campaign.h"

ABSL_FLAG(int64_t, seeds, 200, "how many seeds to run");
ABSL_FLAG(uint64_t, first_seed, 1, "the first seed of the campaign");
ABSL_FLAG(int64_t, seed, -1, "replay this one seed, printing its trace");
ABSL_FLAG(bool, trace, false, "print every run's trace");
ABSL_FLAG(std::string, work_dir, "/tmp", "where runs keep their data while they run");
ABSL_FLAG(std::string, negative_control, "",
          "break the system on purpose to see the checker fail: no_dedupe, "
          "no_dedupe_inbox, unsynced_enqueue, late_ids, legacy_claims_inbox, and with two shards "
          "no_business_fence or cas_ignores_epoch");
ABSL_FLAG(int32_t, repeat, 1, "with --seed: run it this many times in one process");
ABSL_FLAG(bool, harsh, false, "arm every fault point and make the network worse");
ABSL_FLAG(bool, shards, false,
          "two shards, each a sidecar and its own business, coordinated through a map store "
          "with leases, with slot moves during the faults");

int main(int argc, char** argv) {
  eonce::ParseFlags(argc, argv, {"sim [--seeds=N] [--first_seed=S] | --seed=S"});
  eonce::sim::CampaignOptions options;
  options.work_dir = absl::GetFlag(FLAGS_work_dir);
  options.trace = absl::GetFlag(FLAGS_trace);
  options.base.harsh = absl::GetFlag(FLAGS_harsh);
  options.base.shards = absl::GetFlag(FLAGS_shards);
  const std::string control = absl::GetFlag(FLAGS_negative_control);
  if (control == "no_dedupe") {
    options.base.disable_sidecar_dedupe = true;
  } else if (control == "no_dedupe_inbox") {
    options.base.disable_sidecar_dedupe = true;
    options.base.inbox_business = true;
  } else if (control == "unsynced_enqueue") {
    options.base.unsynced_enqueue = true;
  } else if (control == "late_ids") {
    options.base.late_ids = true;
  } else if (control == "legacy_claims_inbox") {
    options.base.legacy_claims_inbox = true;
  } else if (control == "no_business_fence") {
    options.base.shards = true;
    options.base.no_business_fence = true;
  } else if (control == "cas_ignores_epoch") {
    options.base.shards = true;
    options.base.cas_ignores_epoch = true;
  } else if (!control.empty()) {
    std::fprintf(stderr,
                 "sim: negative_control must be no_dedupe, no_dedupe_inbox, unsynced_enqueue, "
                 "late_ids, legacy_claims_inbox, no_business_fence or cas_ignores_epoch\n");
    return 2;
  }
  if (absl::GetFlag(FLAGS_seed) >= 0) {
    options.first_seed = static_cast<uint64_t>(absl::GetFlag(FLAGS_seed));
    options.seeds = 1;
    options.trace = true;
  } else {
    options.first_seed = absl::GetFlag(FLAGS_first_seed);
    options.seeds = absl::GetFlag(FLAGS_seeds);
  }
  int64_t violations = 0;
  for (int i = 0; i < std::max(1, absl::GetFlag(FLAGS_repeat)); ++i) {
    eonce::sim::CampaignReport report = eonce::sim::RunCampaign(options);
    std::printf("%s", report.text.c_str());
    violations += report.violations;
  }
  return violations == 0 ? 0 : 1;
}
