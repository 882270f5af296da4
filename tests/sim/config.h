// The world's configuration, all drawn from the seed: the workload's size, which fault
// points are armed and how likely they fire, each link's faults, the partitions and the
// credential revocation.
#ifndef EONCE_TESTS_SIM_CONFIG_H_
#define EONCE_TESTS_SIM_CONFIG_H_

#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include "common/base/random.h"
#include "tests/sim/sim.h"

namespace eonce::sim::internal {

// How long the faults last; the world then settles and is checked. A sharded world runs
// five processes, so its faults last less, so that a campaign of 2,000 seeds stays within
// a few minutes on two cores.
inline constexpr int64_t kFaultPhaseMs = 15'000;
inline constexpr int64_t kShardedFaultPhaseMs = 6'000;

struct LinkFaults {
  double drop = 0;
  double duplicate = 0;
  double lose_answer = 0;
  int64_t min_delay_ms = 1;
  int64_t max_delay_ms = 10;
};

struct Config {
  int64_t fault_phase_ms = kFaultPhaseMs;
  bool legacy = false;
  int accounts = 3;
  int transfers = 12;
  double duplicate_enqueue = 0.2;
  // The agent stored the command but its answer never reached the producer.
  double lose_enqueue_answer = 0;
  std::array<double, kFaultPoints> fault_probability{};
  LinkFaults agent_link, business_link;
  std::vector<std::pair<int64_t, int64_t>> partitions;  // [start, end) of agent<->sidecar
  // Sharded worlds. A forward that reaches the business after the sidecar gave up on it.
  double late_forward = 0;
  // A slow disk at each business: every answer waits this much longer for its sync.
  std::array<int64_t, 2> slow_sync_ms{};
  // [start, end) in which a sidecar cannot reach the coordination store (agents and the
  // mover still reach it), some longer than the lease's TTL.
  std::array<std::vector<std::pair<int64_t, int64_t>>, 2> store_partitions;
  // Each sidecar's clock: an offset and a drift (within the lease's drift allowance).
  std::array<int64_t, 2> clock_offset_ms{};
  std::array<double, 2> clock_drift{};
  // The chance that a move gets a second, interleaved mover (on the same run, or on an
  // overlapping one), and that a run of the mover aborts the move instead.
  double rival_mover = 0;
  double abort_move = 0;
  // The chance that a shard of a move is down at its flip.
  double down_at_flip = 0;
  bool revoke = false;
  int64_t revoke_at_ms = 0;
  int64_t revoke_for_ms = 0;
};

Config DrawConfig(Random& r, const SimOptions& options);

}  // namespace eonce::sim::internal

#endif  // EONCE_TESTS_SIM_CONFIG_H_
