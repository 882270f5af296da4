// The coordination service under sharding: where the slot map lives and who serves which
// shard. The real one is etcd (etcd_map_store.h); the simulation has its own in memory.
//
// The slot map is one key. Its epoch is that key's mod_revision in etcd: a map read from
// the store carries the revision it was written at as its epoch, so two different maps can
// never share an epoch. Every change is a compare-and-swap on the predecessor's revision
// (one etcd Txn): two movers cannot both win, and the loser re-reads and goes on from what
// the store says.
//
// Each shard's sidecar holds a lease on its shard (ShardLease): one process per shard id at
// a time, serving only while it knows its lease to be alive, and publishing under the lease
// the newest map it adopted and drained (its acknowledgement). A move reads the
// acknowledgements (Presence) to know when a step has reached the shards it concerns.
#ifndef EONCE_COMMON_COORD_MAP_STORE_H_
#define EONCE_COMMON_COORD_MAP_STORE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "common/coord/slots.h"

namespace eonce {

// What the store says of one shard.
struct ShardPresence {
  bool live = false;        // its sidecar holds the shard's lease now
  uint64_t held_epoch = 0;  // the newest map it adopted and drained (0: none yet)
  std::string address;      // where it serves, as it published
};

class MapStore {
 public:
  virtual ~MapStore() = default;

  // The current map, its epoch set to its revision. NOT_FOUND when there is no map yet;
  // UNAVAILABLE when the store cannot be reached.
  virtual absl::StatusOr<SlotMap> Read() = 0;

  // Writes `next` (its epoch field is ignored) only if the map's revision is still
  // `expected_epoch` (0: no map yet). Returns the map as stored, its epoch the new revision.
  // ABORTED, reason EPOCH_CHANGED, when another write came first; nothing is written then.
  virtual absl::StatusOr<SlotMap> CompareAndSwap(uint64_t expected_epoch,
                                                 const SlotMap& next) = 0;

  // Waits up to `timeout_ms` for a map with an epoch above `after_epoch` and returns the
  // newest; DEADLINE_EXCEEDED when none came. A caller that was away passes the epoch it
  // last saw and gets what it missed.
  virtual absl::StatusOr<SlotMap> WaitNewer(uint64_t after_epoch, int64_t timeout_ms) = 0;

  virtual absl::StatusOr<ShardPresence> Presence(const std::string& shard) = 0;
};

// One sidecar's hold on its shard. Not thread-safe: one coordination thread drives it.
class ShardLease {
 public:
  virtual ~ShardLease() = default;

  // Takes the shard's lease and publishes `address` under it. FAILED_PRECONDITION, reason
  // SHARD_HELD, while another process holds it (its lease must lapse first): retry.
  virtual absl::Status Acquire(const std::string& shard, const std::string& address) = 0;

  // Renews the lease. An error means it may be lost: ServeUntilMs no longer grows.
  virtual absl::Status Renew() = 0;

  // The time (on the injected clock, ms) until which this process may serve: the send time
  // of the last renewal etcd answered, plus the lease's TTL, minus the safety margin (see
  // the protocol README). 0 when no lease is held.
  virtual int64_t ServeUntilMs() const = 0;

  // Publishes, under the lease, that this sidecar holds and drained the map at `epoch`.
  virtual absl::Status Acknowledge(uint64_t epoch) = 0;

  // Gives the lease back (a clean stop): the shard is free at once.
  virtual void Release() = 0;
};

}  // namespace eonce

#endif  // EONCE_COMMON_COORD_MAP_STORE_H_
