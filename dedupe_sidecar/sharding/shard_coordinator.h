// ShardCoordinator: the one thread of a sharded sidecar that talks to the coordination
// store (common/coord/map_store.h). It holds the shard's lease and keeps the gate's map
// current:
//   acquire the lease (again and again while another process holds it, SHARD_HELD);
//   read the map; gate.Adopt (waiting for the moved slots' work); Acknowledge(epoch);
//   only then let the gate serve, until the lease's ServeUntilMs;
//   loop: WaitNewer -> Adopt -> Acknowledge; Renew every TTL/3.
// On losing the lease (a renewal answered that it is gone) the gate stops serving at once
// and the cycle starts again from the acquisition. A renewal that fails for want of an
// answer leaves the gate serving until the last ServeUntilMs, which ends strictly before the
// store could give the shard to another process.
//
// A map a mover pushed (AdoptSlotMap) is acknowledged here too, once drained.
// With a business of the shard's own (BusinessSlots), every map acknowledged is then told
// to it (HoldBusinessSlots): the slots it gives this shard are the business's to count and
// relay. A failed hold is logged and tried again on the next turn, for the newest epoch
// acknowledged; it never stops the map from being followed.
// Step() is one turn of the loop, for tests and the simulation; Start() runs it on a
// thread until Stop(), which gives the lease back. Not thread-safe apart from Start/Stop.
#ifndef EONCE_DEDUPE_SIDECAR_SHARDING_SHARD_COORDINATOR_H_
#define EONCE_DEDUPE_SIDECAR_SHARDING_SHARD_COORDINATOR_H_

#include <cstdint>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "common/coord/map_store.h"
#include "dedupe_sidecar/sharding/shard_gate.h"
#include "dedupe_sidecar/sharding/slot_transfer.h"

namespace eonce {

struct ShardCoordinatorOptions {
  std::string shard;
  std::string address;  // published with the lease
  int64_t lease_ttl_ms = 10'000;
  // A turn waits at most this long for a newer map (bounded so Stop is prompt).
  int64_t max_wait_ms = 1'000;
  // After a failed turn, the next comes this much later (doubling up to retry_max_ms).
  int64_t retry_ms = 100;
  int64_t retry_max_ms = 2'000;
  // Each adoption waits this long for the moved slots' work before trying again.
  int64_t drain_timeout_ms = 1'000;
  // Each HoldSlotData to the business waits at most this long: well inside a renewal
  // period, so that a slow business cannot let the lease lapse.
  int64_t business_hold_timeout_ms = 1'000;
};

class ShardCoordinator {
 public:
  // `business`: null unless the business's data is this shard's own (move_business_data);
  // it must outlive the coordinator.
  ShardCoordinator(ShardGate& gate, MapStore& store, ShardLease& lease, Clock& clock,
                   ShardCoordinatorOptions options, BusinessSlots* business = nullptr)
      : gate_(gate),
        store_(store),
        lease_(lease),
        clock_(clock),
        o_(std::move(options)),
        business_(business) {}
  ~ShardCoordinator() { Stop(); }

  // One turn; `wait_ms` bounds the wait for a newer map (0: none).
  absl::Status Step(int64_t wait_ms);

  void Start();
  // Stops the thread, closes the gate and gives the lease back.
  void Stop();

  // The epoch last acknowledged in the store under the current lease (0: none yet).
  uint64_t acknowledged() const { return acked_; }
  // The epoch of the last map the business was told it holds (0: none yet, or no business).
  uint64_t business_held() const { return business_held_; }
  // Waits up to `limit` until the gate serves under a lease with a map of at least `epoch`
  // acknowledged (for tests and tools that start sidecars); any thread.
  bool AwaitServing(uint64_t epoch, absl::Duration limit);

 private:
  absl::Status RenewIfDue();
  // Reads (fresh lease) or waits for a newer map, adopts it and acknowledges it. A failure
  // here does not stop the serving window the renewals keep open.
  absl::Status FollowTheMap(int64_t wait_ms);
  // Tells the business the acknowledged map's slots, if not done yet (logged on failure).
  void HoldBusinessSlotsIfDue();

  ShardGate& gate_;
  MapStore& store_;
  ShardLease& lease_;
  Clock& clock_;
  const ShardCoordinatorOptions o_;
  BusinessSlots* const business_;
  // The acknowledged map the hold is for, and the epoch the business last held.
  std::shared_ptr<const SlotMap> acked_map_;
  uint64_t business_held_ = 0;
  std::string hold_error_;  // the last failure logged, so that a repeat is not
  bool leased_ = false;
  uint64_t acked_ = 0;
  int64_t renewed_at_ms_ = 0;
  // What AwaitServing watches: the epoch acknowledged while serving (0: not serving).
  absl::Mutex serving_mu_;
  uint64_t serving_epoch_ ABSL_GUARDED_BY(serving_mu_) = 0;
  absl::Notification stop_;
  std::thread thread_;
  bool stopped_ = false;
};

}  // namespace eonce

#endif  // EONCE_DEDUPE_SIDECAR_SHARDING_SHARD_COORDINATOR_H_
