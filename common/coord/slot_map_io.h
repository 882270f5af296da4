// The slot map as a JSON file: the copy a sharded sidecar keeps of the newest map it
// adopted (a cache of the coordination store's map, so that a restart never goes back),
// and the file that seeds an empty store (`eonce reshard seed`). Never the truth: the
// store is (common/coord/map_store.h), and nothing here compares or locks.
//
// A write goes to a temporary file that is synced and renamed over the old one, then the
// directory is synced: a reader sees the old map or the new one, never part of one, and
// after a crash the map is one of the two.
#ifndef EONCE_COMMON_COORD_SLOT_MAP_IO_H_
#define EONCE_COMMON_COORD_SLOT_MAP_IO_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "common/coord/slots.h"

namespace eonce {

// NOT_FOUND when there is no file; INVALID_ARGUMENT for one that is not a valid map.
absl::StatusOr<SlotMap> ReadSlotMapFile(const std::string& path);

// Replaces the file with `map`, atomically and durably.
absl::Status WriteSlotMapFile(const std::string& path, const SlotMap& map);

}  // namespace eonce

#endif  // EONCE_COMMON_COORD_SLOT_MAP_IO_H_
