// The world's configuration, all drawn from the seed: the workload's size, which fault
// points are armed and how likely they fire, each link's faults, the partitions and the
// credential revocation.
#ifndef EONCE_TESTS_SIM_CONFIG_H_
#define EONCE_TESTS_SIM_CONFIG_H_

#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include "common/random.h"
#include "tests/sim/sim.h"

namespace eonce::sim::internal {

// How long the faults last; the world then settles and is checked.
inline constexpr int64_t kFaultPhaseMs = 15'000;

struct LinkFaults {
  double drop = 0;
  double duplicate = 0;
  double lose_answer = 0;
  int64_t min_delay_ms = 1;
  int64_t max_delay_ms = 10;
};

struct Config {
  bool legacy = false;
  int accounts = 3;
  int transfers = 12;
  double duplicate_enqueue = 0.2;
  // The agent stored the command but its answer never reached the producer.
  double lose_enqueue_answer = 0;
  std::array<double, kFaultPoints> fault_probability{};
  LinkFaults agent_link, business_link;
  std::vector<std::pair<int64_t, int64_t>> partitions;  // [start, end) of agent<->sidecar
  bool revoke = false;
  int64_t revoke_at_ms = 0;
  int64_t revoke_for_ms = 0;
};

Config DrawConfig(Random& r, const SimOptions& options);

}  // namespace eonce::sim::internal

#endif  // EONCE_TESTS_SIM_CONFIG_H_
