// Test decorators of a MapStore (testonly).
//
// BlindMapStore: a compare-and-swap that does not compare -- it writes over whatever map
// is stored, as a store without the predecessor check would. For negative controls only
// (the mover's tests and the simulation): with it, two movers racing from one epoch must
// be caught forking the map.
//
// HookMapStore: runs a hook once, just before the first compare-and-swap through it, so a
// test can put another run's steps exactly between this run's read and its write.
#ifndef EONCE_COMMON_COORD_BLIND_MAP_STORE_H_
#define EONCE_COMMON_COORD_BLIND_MAP_STORE_H_

#include <functional>
#include <utility>

#include "common/coord/map_store.h"

namespace eonce {

class BlindMapStore : public MapStore {
 public:
  explicit BlindMapStore(MapStore& store) : store_(store) {}

  absl::StatusOr<SlotMap> Read() override { return store_.Read(); }
  absl::StatusOr<SlotMap> CompareAndSwap(uint64_t, const SlotMap& next) override {
    absl::StatusOr<SlotMap> current = store_.Read();
    const uint64_t found = current.ok() ? current->epoch() : 0;
    if (!current.ok() && current.status().code() != absl::StatusCode::kNotFound) {
      return current.status();
    }
    return store_.CompareAndSwap(found, next);
  }
  absl::StatusOr<SlotMap> WaitNewer(uint64_t after_epoch, int64_t timeout_ms) override {
    return store_.WaitNewer(after_epoch, timeout_ms);
  }
  absl::StatusOr<ShardPresence> Presence(const std::string& shard) override {
    return store_.Presence(shard);
  }

 private:
  MapStore& store_;
};

class HookMapStore : public MapStore {
 public:
  HookMapStore(MapStore& store, std::function<void()> hook)
      : store_(store), hook_(std::move(hook)) {}

  absl::StatusOr<SlotMap> Read() override { return store_.Read(); }
  absl::StatusOr<SlotMap> CompareAndSwap(uint64_t expected_epoch, const SlotMap& next) override {
    if (hook_) {
      std::function<void()> hook = std::move(hook_);
      hook_ = nullptr;
      hook();
    }
    return store_.CompareAndSwap(expected_epoch, next);
  }
  absl::StatusOr<SlotMap> WaitNewer(uint64_t after_epoch, int64_t timeout_ms) override {
    return store_.WaitNewer(after_epoch, timeout_ms);
  }
  absl::StatusOr<ShardPresence> Presence(const std::string& shard) override {
    return store_.Presence(shard);
  }

 private:
  MapStore& store_;
  std::function<void()> hook_;
};

}  // namespace eonce

#endif  // EONCE_COMMON_COORD_BLIND_MAP_STORE_H_
