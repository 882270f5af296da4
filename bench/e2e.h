// eonce bench, end to end: from a producer's Enqueue returning at the agent (the command
// durable in the outbox) to the command ACKED there (the agent's Watch stream: the ledger
// applied it, and its answer came back), and to the ledger's effect (the business's
// applied_at_ms, which has a millisecond's resolution). At 1 in flight (one command at a
// time), and under an open loop: commands offered at a steady rate whatever the answers.
#ifndef EONCE_BENCH_E2E_H_
#define EONCE_BENCH_E2E_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace eonce::bench {

struct EndToEndLatency {
  int64_t commands = 0;  // whose ACKED was seen
  int64_t missing = 0;   // enqueued but not seen ACKED within the wait
  double acked_p50_us = 0;
  double acked_p99_us = 0;
  // To the business's effect time, for at most kMaxEffectQueries of the commands.
  double effect_p50_ms = 0;
  double effect_p99_ms = 0;
};

struct EndToEndFigures {
  EndToEndLatency one;      // 1 in flight
  EndToEndLatency loaded;   // open loop at offered_per_s; commands 0 when not measured
  double offered_per_s = 0;
};

inline constexpr int64_t kMaxEffectQueries = 2'000;

// Measures against a running agent (on `agent_address`, replaying to a sidecar in front
// of the ledger on `ledger_address`) for `seconds` at 1 in flight and, when
// `offered_per_s` > 0, for `seconds` of an open loop at that rate. The agent's credential
// must be live. Command ids start with "e2e-".
absl::Status BenchEndToEnd(const std::string& agent_address, const std::string& ledger_address,
                           int accounts, double seconds, double offered_per_s,
                           EndToEndFigures* out);

// The budget of a command at 1 in flight, from the limits measured in the same run: one
// synced put (Enqueue's), one two-hop echo (agent -> sidecar -> ledger and back), one synced
// put (the business's commit); each their p50 at 1 in flight.
inline double EndToEndBudgetUs(double synced_put_p50_us, double two_hop_echo_p50_us) {
  return 2 * synced_put_p50_us + two_hop_echo_p50_us;
}

// latest.json's "e2e" object, and the lines the bench prints under its table.
std::string EndToEndJson(const EndToEndFigures& f, double budget_us);
std::string EndToEndText(const EndToEndFigures& f, double budget_us);

}  // namespace eonce::bench

#endif  // EONCE_BENCH_E2E_H_
