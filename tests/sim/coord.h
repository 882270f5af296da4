// The simulated coordination store (etcd in production): the slot map as one key whose
// revision is its epoch, changed only by compare-and-swap, and one lease per shard that
// expires on the store's own clock (true time) a TTL after the last keepalive it received.
//
// Each sidecar reaches it through its own SimShardLease and SimMapStore, on the sidecar's
// own clock (NodeClock: an offset and a drift within the lease margin), and every call
// fails while that sidecar is partitioned from the store. The sidecar serves only while its
// clock is below ServeUntilMs, computed as the protocol says (send time of the last
// answered renewal + TTL * (1 - drift allowance) - margin); the world checks that nobody
// ever serves past the store's expiry of its lease.
//
// The negative control `cas_ignores_epoch` makes every compare-and-swap succeed, as a map
// store that ignores the expected epoch would: two movers then fork the map.
//
// Not thread-safe: the simulation runs on one thread.
#ifndef EONCE_TESTS_SIM_COORD_H_
#define EONCE_TESTS_SIM_COORD_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "common/base/clock.h"
#include "common/coord/map_store.h"
#include "common/coord/slots.h"

namespace eonce::sim::internal {

// The lease timings of the simulated world: the protocol's (TTL 10 s, renewed every TTL/3,
// 1% drift allowance, 1 s margin) scaled to the simulation's 15 s of faults.
inline constexpr int64_t kLeaseTtlMs = 2'000;
inline constexpr int64_t kLeaseRenewMs = kLeaseTtlMs / 3;
inline constexpr double kLeaseDriftAllowance = 0.01;
inline constexpr int64_t kLeaseMarginMs = 300;

// A node's clock: true time seen with an offset, running `drift` faster (negative: slower).
class NodeClock : public Clock {
 public:
  NodeClock(Clock& truth, int64_t offset_ms, double drift)
      : truth_(truth), origin_ms_(truth.NowMs()), offset_ms_(offset_ms), drift_(drift) {}
  int64_t NowMs() override {
    const int64_t elapsed = truth_.NowMs() - origin_ms_;
    return origin_ms_ + offset_ms_ + elapsed + static_cast<int64_t>(elapsed * drift_);
  }
  void SleepMs(int64_t) override {}  // the simulation never sleeps

 private:
  Clock& truth_;
  const int64_t origin_ms_;
  const int64_t offset_ms_;
  const double drift_;
};

class SimCoord {
 public:
  SimCoord(Clock& truth, bool cas_ignores_epoch)
      : truth_(truth), cas_ignores_epoch_(cas_ignores_epoch) {}

  absl::StatusOr<SlotMap> Read() const;
  absl::StatusOr<SlotMap> CompareAndSwap(uint64_t expected_epoch, const SlotMap& next);
  ShardPresence Presence(const std::string& shard);

  // Leases, by an id the store hands out. Acquire fails with SHARD_HELD while a live lease
  // holds the shard.
  absl::StatusOr<int64_t> Acquire(const std::string& shard, const std::string& address);
  absl::Status KeepAlive(int64_t lease);
  absl::Status Acknowledge(int64_t lease, uint64_t epoch);
  void Revoke(int64_t lease);
  // When the store lets lease `lease` go (true time); 0 for an unknown or expired one.
  int64_t ExpiresAtMs(int64_t lease);

  uint64_t revision() const { return revision_; }

 private:
  struct Lease {
    std::string shard;
    std::string address;
    int64_t expires_at_ms = 0;
    uint64_t held_epoch = 0;
  };
  // Forgets leases past their expiry (the store's own timer).
  void Expire();

  Clock& truth_;
  const bool cas_ignores_epoch_;
  std::optional<SlotMap> map_;
  uint64_t revision_ = 0;
  int64_t next_lease_ = 1;
  std::map<int64_t, Lease> leases_;
};

// The map store as one node reaches it; every call fails while `reachable` says no.
class SimMapStore : public MapStore {
 public:
  SimMapStore(SimCoord& coord, std::function<bool()> reachable)
      : coord_(coord), reachable_(std::move(reachable)) {}
  absl::StatusOr<SlotMap> Read() override;
  absl::StatusOr<SlotMap> CompareAndSwap(uint64_t expected_epoch, const SlotMap& next) override;
  // Never blocks: the simulation's sidecars poll on their coordination tick.
  absl::StatusOr<SlotMap> WaitNewer(uint64_t after_epoch, int64_t timeout_ms) override;
  absl::StatusOr<ShardPresence> Presence(const std::string& shard) override;

 private:
  SimCoord& coord_;
  std::function<bool()> reachable_;
};

// One sidecar process's lease, on that sidecar's clock.
class SimShardLease : public ShardLease {
 public:
  SimShardLease(SimCoord& coord, Clock& clock, std::function<bool()> reachable)
      : coord_(coord), clock_(clock), reachable_(std::move(reachable)) {}
  absl::Status Acquire(const std::string& shard, const std::string& address) override;
  absl::Status Renew() override;
  int64_t ServeUntilMs() const override { return serve_until_ms_; }
  absl::Status Acknowledge(uint64_t epoch) override;
  void Release() override;

  bool held() const { return lease_ != 0; }
  int64_t lease_id() const { return lease_; }
  int64_t last_renewal_ms() const { return last_sent_ms_; }

 private:
  // ServeUntilMs after a keepalive sent at `sent_ms` (this clock) was answered.
  void Answered(int64_t sent_ms);

  SimCoord& coord_;
  Clock& clock_;
  std::function<bool()> reachable_;
  int64_t lease_ = 0;
  int64_t serve_until_ms_ = 0;
  int64_t last_sent_ms_ = 0;
};

}  // namespace eonce::sim::internal

#endif  // EONCE_TESTS_SIM_COORD_H_
