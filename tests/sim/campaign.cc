#include "tests/sim/campaign.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace eonce::sim {

CampaignReport RunCampaign(const CampaignOptions& options) {
  CampaignReport report;
  auto start = std::chrono::steady_clock::now();
  std::string failures;
  for (int64_t i = 0; i < options.seeds; ++i) {
    SimOptions run = options.base;
    run.seed = options.first_seed + static_cast<uint64_t>(i);
    run.work_dir = options.work_dir;
    run.print_trace = options.trace;
    SimResult result = RunSeed(run);
    ++report.seeds;
    report.crashes += result.crashes;
    report.legacy_runs += result.legacy;
    report.max_settle_ms = std::max(report.max_settle_ms, result.settle_ms);
    report.moves += result.moves;
    report.move_attempts += result.move_attempts;
    report.aborted_moves += result.aborted_moves;
    report.fenced += result.fenced;
    report.not_leased += result.not_leased;
    report.credits += result.credits;
    for (int p = 0; p < kFaultPoints; ++p) report.fired[p] += result.fired[p];
    if (options.trace) {
      absl::StrAppend(&report.text, "seed ", run.seed, " trace hash ",
                      absl::StrFormat("%016x", result.trace_hash), " events ", result.events,
                      " commands ", result.commands, " crashes ", result.crashes, "\n");
    }
    if (!result.violations.empty()) {
      if (report.failing_seeds == 0) report.first_failing_seed = run.seed;
      ++report.failing_seeds;
      report.violations += static_cast<int64_t>(result.violations.size());
      for (const std::string& v : result.violations) {
        absl::StrAppend(&failures, "  seed ", run.seed, ": ", v, "\n");
      }
      absl::StrAppend(&failures, "  replay: ", ReplayCommand(run.seed, run.shards), "\n");
    }
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  absl::StrAppend(&report.text,
                  absl::StrFormat("sim: %d seeds (from %d) in %.1f s, %.1f seeds/s, %d crashes, "
                                  "%d runs with a legacy business, slowest settle %d ms\n",
                                  report.seeds, options.first_seed, report.seconds,
                                  report.seeds / std::max(report.seconds, 1e-9), report.crashes,
                                  report.legacy_runs, report.max_settle_ms));
  if (options.base.shards) {
    absl::StrAppend(&report.text,
                    absl::StrFormat("slot moves: %d finished and %d rolled back in %d runs of "
                                    "the mover; %d credits relayed; %d writes refused by a "
                                    "business's fence; %d commands refused with no lease\n",
                                    report.moves, report.aborted_moves, report.move_attempts,
                                    report.credits, report.fenced, report.not_leased));
  }
  absl::StrAppend(&report.text, "fault points fired:\n");
  for (int p = 0; p < kFaultPoints; ++p) {
    absl::StrAppend(&report.text,
                    absl::StrFormat("  %-38s %d\n", FaultPointName(static_cast<FaultPoint>(p)),
                                    report.fired[p]));
  }
  absl::StrAppend(&report.text, "violations: ", report.violations, "\n", failures);
  return report;
}

}  // namespace eonce::sim
