// MemoryMapStore: the coordination service (map_store.h) in memory, for unit tests and the
// simulation.
//
// It keeps what etcd keeps and in the same way: one revision counter for every write (the
// map's and the shards' keys alike, so epochs are increasing but not consecutive), the
// map's epoch its last write's revision, and one lease per shard with a TTL counted on the
// injected Clock from when a renewal arrives. A lease lapses when the clock passes its
// expiry; a lapsed shard is not live and may be taken by another process.
//
// Test switches: SetPartitioned(shard) cuts one shard's sidecar off the store (its
// Acquire, Renew and Acknowledge fail UNAVAILABLE, so its ServeUntilMs stops growing and
// its lease lapses on the clock); SetDown makes every call fail UNAVAILABLE.
//
// Thread-safe. WaitNewer waits in real time (a condition variable) for a write by another
// thread; the simulation, which has one thread, passes 0. Leases must not outlive their
// store.
#ifndef EONCE_COMMON_COORD_MEMORY_MAP_STORE_H_
#define EONCE_COMMON_COORD_MEMORY_MAP_STORE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "absl/synchronization/mutex.h"
#include "common/base/clock.h"
#include "common/coord/map_store.h"

namespace eonce {

struct MemoryLeaseOptions {
  int64_t ttl_ms = 10'000;
  // Taken off the lease's end on top of the 1% drift (the protocol's margin).
  int64_t margin_ms = 1'000;
};

class MemoryMapStore : public MapStore {
 public:
  explicit MemoryMapStore(Clock& clock) : clock_(clock) {}

  absl::StatusOr<SlotMap> Read() override;
  absl::StatusOr<SlotMap> CompareAndSwap(uint64_t expected_epoch, const SlotMap& next) override;
  absl::StatusOr<SlotMap> WaitNewer(uint64_t after_epoch, int64_t timeout_ms) override;
  absl::StatusOr<ShardPresence> Presence(const std::string& shard) override;

  // A lease handle for one sidecar process.
  std::unique_ptr<ShardLease> NewLease(MemoryLeaseOptions options = {});

  void SetPartitioned(const std::string& shard, bool partitioned);
  void SetDown(bool down);
  // Map writes that succeeded (seed included).
  int64_t map_writes() const;

 private:
  friend class MemoryShardLease;
  struct Holder {
    uint64_t lease_id = 0;
    int64_t expires_ms = 0;
    uint64_t held_epoch = 0;
    std::string address;
  };

  absl::Status Reachable(const std::string& shard) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // The shard's holder if its lease has not lapsed.
  const Holder* LiveHolder(const std::string& shard) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Clock& clock_;
  mutable absl::Mutex mu_;
  uint64_t revision_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_lease_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::optional<SlotMap> map_ ABSL_GUARDED_BY(mu_);
  int64_t map_writes_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, Holder> holders_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> partitioned_ ABSL_GUARDED_BY(mu_);
  bool down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace eonce

#endif  // EONCE_COMMON_COORD_MEMORY_MAP_STORE_H_
