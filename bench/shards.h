// eonce bench, sharded: first-seen commands through 1, 2 and 4 sharded sidecars in front
// of one ledger (its data shared by every shard), routed by slot as the agent routes
// them; and the pause a moving run of slots' commands sees while `eonce reshard` moves it.
#ifndef EONCE_BENCH_SHARDS_H_
#define EONCE_BENCH_SHARDS_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "bench/loops.h"

namespace eonce::bench {

struct ShardFigures {
  // (shards, first-seen at `in_flight` calls in flight, summed over the shards)
  std::vector<std::pair<int, Figures>> first_seen;
  int in_flight = 64;
  // Every slot moved between two shards, a run at a time, under load on the moving run.
  uint32_t moved_slots = 0;
  uint32_t runs = 0;
  int64_t frozen_ms = -1;     // the longest run's, as eonce reshard reports it (freeze to flip)
  int64_t copied = 0;         // records copied
  int64_t moving_commands = 0;  // commands on the run finished while it moved
  double pause_p50_ms = 0;    // their time from first attempt to answer
  double pause_p99_ms = 0;
  double pause_max_ms = 0;
  int64_t lost = 0;           // commands on the run that never got an answer (must be 0)
};

// `ledger_port`: a ledger holding accounts a0..a(accounts-1) on loopback; `base`: a fresh
// folder for the sidecars' data. False if a stack did not start.
bool BenchShards(const MeasureOptions& measure, int ledger_port, const std::string& base,
                 int accounts, ShardFigures* figures);

}  // namespace eonce::bench

#endif  // EONCE_BENCH_SHARDS_H_
