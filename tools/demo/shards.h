// The demo's shards (./eonce demo --shards N): N sidecars, each taking the slots the slot
// map (in the demo's etcd) gives it, and the map's moves.
#ifndef EONCE_TOOLS_DEMO_SHARDS_H_
#define EONCE_TOOLS_DEMO_SHARDS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/coord/map_store.h"
#include "common/coord/slots.h"

namespace eonce::demo {

// Writes the map that gives shards s0..s(n-1), at `addresses`, equal runs of slots, over
// the map at `expected_epoch` (0: none yet); the map as stored.
absl::StatusOr<SlotMap> WriteEvenSlotMap(MapStore& store, uint64_t expected_epoch,
                                         const std::vector<std::string>& addresses);

// Waits until the sidecar at `address` holds a map at `epoch` or later (it reads it from
// etcd).
absl::Status AwaitSlotMap(const std::string& address, uint64_t epoch, int64_t timeout_ms);

// Runs the real `eonce reshard` binary once with `args`, its output appended to `log`;
// returns its exit status.
int RunReshard(const std::string& bin, const std::vector<std::string>& args,
               const std::string& log);

// The index of the shard ("s<i>") that owns (tenant, entity) in `map`.
int ShardOf(const SlotMap& map, const std::string& tenant, const std::string& type,
            const std::string& id);

}  // namespace eonce::demo

#endif  // EONCE_TOOLS_DEMO_SHARDS_H_
