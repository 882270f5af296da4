// ChaosStack: sharding on etcd with every process real, on loopback, for the chaos test.
//
//   3 etcd members  <-  sidecars s0..s4 (each holding its shard's lease; s1 reaches etcd
//                       only through FaultProxies the test can blackhole)
//   per shard:      a ledger (--cross_slot_credits) behind its sidecar, and a relay agent
//                   per tenant carrying its credits to the other shards
//   per tenant:     an outbox agent routing by slot, fed by a LoadClient
//   the first map:  seeded into the empty store by the test
//   moves:          the real `eonce reshard` binary, as separate processes (two at once,
//                   killed, run again)
//
// Faults are injected by name and counted in a FaultLog, which prints them as a table.
// Every process keeps its port across restarts. Bounded: each wait has a limit.
#ifndef EONCE_TESTS_FAULTS_CHAOS_STACK_H_
#define EONCE_TESTS_FAULTS_CHAOS_STACK_H_

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/coord/etcd_client.h"
#include "common/coord/etcd_map_store.h"
#include "common/coord/slots.h"
#include "tests/faults/stack.h"
#include "tests/util/etcd_cluster.h"
#include "tests/util/fault_proxy.h"

namespace eonce::testing {

inline constexpr int kChaosShards = 5;
inline constexpr int kEtcdMembers = 3;
// The shard whose sidecar reaches etcd through proxies: it stays to the end (s0 and s1 are
// the two shards left), so a partition meets it as old owner and as new one.
inline constexpr int kPartitionedShard = 1;

// The faults injected, by kind, and what came of them; printed as the run's table.
class FaultLog {
 public:
  void Count(const std::string& fault, int n = 1);
  void Note(const std::string& fault, const std::string& note);
  std::map<std::string, int> counts() const;
  std::string Table() const;

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, int> counts_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> notes_ ABSL_GUARDED_BY(mu_);
};

struct ChaosOptions {
  std::vector<std::string> tenants = {"acme", "globex"};
  int64_t lease_ttl_ms = 3000;
  // Off: the negative control, whose sidecars leave the business's rows behind when slots
  // move (the checker must see accounts away from their owners).
  bool move_business_data = true;
  uint64_t seed = 1;
};

class ChaosStack {
 public:
  ChaosStack(std::string dir, ChaosOptions options, FaultLog& log);
  ~ChaosStack();

  // etcd, shards s0..s2 under a seeded map, the agents and the relays.
  absl::Status Start();
  // A new shard: its ledger, its sidecar (which takes its lease and publishes its
  // address) and its relays.
  absl::Status AddShard(int i);
  // A shard whose slots all moved away leaves (SIGTERM) once its ledger's outbox and its
  // relays are drained (bounded: 2 minutes); false if they never drained.
  bool StopShard(int i);
  // The credits shard i's ledger still holds for its relays, over every tenant (-1: it
  // cannot be asked).
  int64_t PendingFollowUps(int i) const;
  // Starts a stopped shard's ledger again, alone, so that its books can be read.
  absl::Status ReopenLedger(int i);

  // kill -9 of a random live process (an etcd member, a sidecar, a ledger, an agent, a
  // relay), started again; never a paused sidecar, never a second etcd member while one
  // is down. Returns the kind of process killed.
  absl::StatusOr<std::string> KillOne(std::mt19937_64& rng);
  // The paused-leader case: SIGSTOP / SIGCONT of shard i's sidecar.
  void Pause(int shard);
  void Resume(int shard);
  // Cuts shard kPartitionedShard's sidecar off etcd (agents still reach it), or heals it.
  void Partition(bool on);

  // Starts `eonce reshard` with `flags` (after the store's flags), its output appended to
  // dir/reshard.log. Returns its pid; Reap waits for it (bounded) and returns its exit
  // status (-1 if it was killed or did not end in time).
  pid_t StartReshard(const std::vector<std::string>& flags);
  int Reap(pid_t pid, int64_t timeout_ms);
  // Its exit status if it ended (then reaped), -1 if killed, -2 while it runs.
  int TryReap(pid_t pid);
  // Runs reshard until one run exits 0; each run is killed (SIGKILL) after 0-300 ms with
  // probability 1/3. Returns how many runs were killed, or -1 if none finished (bounded).
  int ReshardUntilDone(const std::vector<std::string>& flags, std::mt19937_64& rng);

  // The map in etcd now.
  absl::StatusOr<SlotMap> ReadMap();

  std::string SidecarAddress(int shard) const;
  std::string LedgerAddress(int shard) const;
  std::string AgentAddress(int tenant) const;
  std::string RelayAddress(int shard, int tenant) const;
  const std::string& dir() const { return dir_; }
  const std::vector<std::string>& tenants() const { return options_.tenants; }
  std::string Endpoints() const;  // the etcd members, comma-separated
  const std::string& prefix() const { return prefix_; }

 private:
  PortedProcess Sidecar(int i, const std::string& endpoints);
  absl::Status StartShard(int i);
  absl::Status StartRelays(int i);

  const std::string dir_;
  const ChaosOptions options_;
  FaultLog& log_;
  const std::string prefix_;
  std::unique_ptr<EtcdCluster> etcd_;
  std::unique_ptr<EtcdClient> etcd_client_;
  std::unique_ptr<EtcdMapStore> store_;  // the test's own view of the map
  std::vector<std::unique_ptr<FaultProxy>> etcd_proxies_;  // kPartitionedShard's way to etcd
  absl::Mutex mu_;  // one kill, pause or stop at a time
  PortedProcess ledgers_[kChaosShards];
  PortedProcess sidecars_[kChaosShards];
  std::vector<PortedProcess> relays_[kChaosShards];  // one a tenant
  std::vector<PortedProcess> agents_;                // one a tenant
  bool live_[kChaosShards] ABSL_GUARDED_BY(mu_) = {};
  bool paused_[kChaosShards] ABSL_GUARDED_BY(mu_) = {};
};

}  // namespace eonce::testing

#endif  // EONCE_TESTS_FAULTS_CHAOS_STACK_H_
