// The slot map as a file: what a ConfigMap mounts, what `eonce reshard` edits locally, and
// where a sidecar keeps the newest map it adopted.
//
// A write goes to a temporary file that is synced and renamed over the old one, then the
// directory is synced: a reader sees the old map or the new one, never part of one, and
// after a crash the map is one of the two. Compare-and-set serializes writers on an
// advisory lock beside the file and checks the epoch it replaces, so two operators (or a
// resumed step) cannot both move from one epoch.
#ifndef EONCE_COMMON_SLOT_MAP_FILE_H_
#define EONCE_COMMON_SLOT_MAP_FILE_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "common/slots.h"

namespace eonce {

// NOT_FOUND when there is no file; INVALID_ARGUMENT for one that is not a valid map.
absl::StatusOr<SlotMap> ReadSlotMapFile(const std::string& path);

// Replaces the file with `map`, atomically and durably.
absl::Status WriteSlotMapFile(const std::string& path, const SlotMap& map);

// Writes `next` only if the file holds epoch `expected_epoch` (0: no file yet) and `next`
// is newer; else ABORTED, reason EPOCH_CHANGED, naming the epoch found.
absl::Status CompareAndSetSlotMapFile(const std::string& path, uint64_t expected_epoch,
                                      const SlotMap& next);

}  // namespace eonce

#endif  // EONCE_COMMON_SLOT_MAP_FILE_H_
