// BlindMapStore: a MapStore whose compare-and-swap does not compare -- it writes over
// whatever map is stored, as a store without the predecessor check would. For negative
// controls only (the mover's tests and the simulation): with it, two movers racing from
// one epoch must be caught forking the map.
#ifndef EONCE_COMMON_COORD_BLIND_MAP_STORE_H_
#define EONCE_COMMON_COORD_BLIND_MAP_STORE_H_

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

}  // namespace eonce

#endif  // EONCE_COMMON_COORD_BLIND_MAP_STORE_H_
