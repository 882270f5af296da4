// The deterministic simulation of the whole pipeline.
//
// One seed drives everything: the workload, the network between the agent and the sidecar
// and between the sidecar and the business (drop, duplicate, delay, reorder, lose the
// answer, partition and heal), which fault points are armed and when they fire (a fired
// point crashes its component: the CrashFileSystem drops whatever was not synced, and the
// component restarts from its data directory), and credential revocations. The real
// Outbox, Replayer, Deduper, Inbox and LedgerCore run against the simulated clock, network
// and disk on one thread. When the faults stop, the checker waits for the system to settle
// and then checks the invariants. The same seed gives the same trace hash.
#ifndef EONCE_TESTS_SIM_SIM_H_
#define EONCE_TESTS_SIM_SIM_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "common/base/fault.h"

namespace eonce::sim {

inline constexpr int kFaultPoints = static_cast<int>(FaultPoint::kCount);

struct SimOptions {
  uint64_t seed = 1;
  // Where the run's data folders go (each run uses and removes its own subfolder).
  std::string work_dir = "/tmp";
  // Negative controls: each must make the checker report a violation.
  bool disable_sidecar_dedupe = false;  // the sidecar forwards everything
  bool unsynced_enqueue = false;        // the outbox says yes before the record is durable
  bool late_ids = false;                // producers leave the command id to the agent
  // A legacy business answers as if it kept an inbox, so the sidecar forwards and
  // answers before its own records are durable.
  bool legacy_claims_inbox = false;
  // In-flight claims that hold nothing: a duplicate of a command in flight to an
  // inbox-keeping business is forwarded again (run with `inbox_business`).
  bool forgetful_claims = false;
  // Every fault point armed, and a harsher network; the negative controls use it.
  bool harsh = false;
  // Never a legacy business (the inbox hides double forwards from the effect checks).
  bool inbox_business = false;
  // Two shards, each a sidecar in front of its own business (services/ledger, whose
  // accounts move with their slots and whose transfers to another shard's account are
  // credits relayed as commands), coordinated through a map store with shard leases, with
  // slot moves during the faults: rival movers, aborts, faults at every step, a shard down
  // at the flip, a sidecar cut off from the store, late forwards, slow disks, skewed
  // clocks.
  bool shards = false;
  // Negative controls (with `shards`): the business applies a forward whatever the epoch
  // it carries (no per-slot fence); the map store ignores the expected epoch of a
  // compare-and-swap (two movers fork the map).
  bool no_business_fence = false;
  bool cas_ignores_epoch = false;
  bool print_trace = false;
};

struct SimResult {
  uint64_t seed = 0;
  uint64_t trace_hash = 0;
  std::vector<std::string> violations;
  std::array<int64_t, kFaultPoints> fired{};
  int64_t events = 0;
  int64_t sim_ms = 0;
  int64_t commands = 0;
  int64_t crashes = 0;
  int64_t settle_ms = 0;  // from the end of the faults until every command was final
  int64_t moves = 0;      // slot moves finished (sharded runs)
  int64_t move_attempts = 0;  // runs of the mover (each move is resumed until it ends)
  int64_t aborted_moves = 0;  // moves rolled back
  int64_t fenced = 0;         // forwards and imports a business refused by its fence
  int64_t not_leased = 0;     // commands a sidecar refused while it held no lease
  int64_t credits = 0;        // follow-ups relayed
  bool legacy = false;
};

SimResult RunSeed(const SimOptions& options);

// The command that replays one seed (of a sharded world with `shards`).
std::string ReplayCommand(uint64_t seed, bool shards = false);

}  // namespace eonce::sim

#endif  // EONCE_TESTS_SIM_SIM_H_
