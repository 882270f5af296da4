// Seeding: the first slot map of an empty store (`eonce reshard seed`, the demo). A file
// may only ever seed the store; once a map exists the store is the truth.
#ifndef EONCE_COMMON_COORD_SEED_H_
#define EONCE_COMMON_COORD_SEED_H_

#include "absl/status/statusor.h"
#include "common/coord/map_store.h"
#include "common/coord/slots.h"

namespace eonce {

// Writes `map` (its epoch ignored) if the store holds no map yet, and returns the map the
// store holds afterwards: `map` at its new epoch, or, when a map already existed, that map
// untouched. So seeding twice, or from two places at once, is harmless; a caller that
// must know whether its own map went in compares the shards and ranges it gets back.
// UNAVAILABLE when the store cannot be reached.
absl::StatusOr<SlotMap> SeedSlotMap(MapStore& store, const SlotMap& map);

}  // namespace eonce

#endif  // EONCE_COMMON_COORD_SEED_H_
