#include "common/coord/seed.h"

#include "common/base/status.h"

namespace eonce {

absl::StatusOr<SlotMap> SeedSlotMap(MapStore& store, const SlotMap& map) {
  absl::StatusOr<SlotMap> seeded = store.CompareAndSwap(0, map);
  if (seeded.ok() || ReasonOf(seeded.status()) != "EPOCH_CHANGED") return seeded;
  return store.Read();
}

}  // namespace eonce
