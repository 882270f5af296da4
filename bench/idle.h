// eonce bench, an idle sidecar: a sidecar process (from the built binaries) in front of a
// ledger process, and an outbox agent with an empty outbox in front of the sidecar, with
// no traffic at all, and the CPU each uses meanwhile: what each costs a pod that is
// quiet, from timers and background threads alone.
#ifndef EONCE_BENCH_IDLE_H_
#define EONCE_BENCH_IDLE_H_

#include <string>

#include "absl/status/status.h"

namespace eonce::bench {

struct IdleFigures {
  double seconds = 0;
  double sidecar_core_pct = -1;  // percent of one core, over `seconds`
  double ledger_core_pct = -1;
  double agent_core_pct = -1;
};

// Starts a ledger, a sidecar and an agent from `bin_dir` under `dir`, lets them settle for
// `settle_seconds` (their start-up work is not idleness), then reads each one's CPU time
// (/proc/<pid>/stat, user + system) `seconds` apart.
absl::Status BenchIdleSidecar(const std::string& bin_dir, const std::string& dir,
                              double settle_seconds, double seconds, IdleFigures* out);

// latest.json's "idle" object, and the line the bench prints.
std::string IdleJson(const IdleFigures& f);
std::string IdleText(const IdleFigures& f);

}  // namespace eonce::bench

#endif  // EONCE_BENCH_IDLE_H_
