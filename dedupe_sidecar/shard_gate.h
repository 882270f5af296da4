// ShardGate: which commands a sharded sidecar may take, by the slot map it holds.
//
// A command whose slot another shard owns is refused before anything is written
// (UNAVAILABLE, SLOT_MOVED, naming the owner, its address and the epoch); one whose slot
// is moving away from or to this shard is refused as retryable (UNAVAILABLE,
// SLOT_MIGRATING). Every command let in
// holds a Pass for its slot until its work is over, so that adopting a map that takes
// slots away can wait until nothing runs for them any more: after that, this shard writes
// nothing for those slots, and a copy of their data is complete.
//
// The gate never goes back to an older map: an adopted map is kept in the sidecar's data
// directory before Adopt returns, and at start the newer of that copy and the configured
// file (a ConfigMap, which may lag) is used. Thread-safe.
#ifndef EONCE_DEDUPE_SIDECAR_SHARD_GATE_H_
#define EONCE_DEDUPE_SIDECAR_SHARD_GATE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/slots.h"

namespace eonce {

class ShardGate {
 public:
  // `shard`: this sidecar's shard id. `map_file`: the configured map; `kept_file`: where
  // adopted maps are kept (in the data directory). The newer of the two is used; at least
  // one must exist.
  static absl::StatusOr<std::unique_ptr<ShardGate>> Open(std::string shard,
                                                         const std::string& map_file,
                                                         const std::string& kept_file);

  // Held by a command for its slot while its work runs; movable, releases once.
  class Pass {
   public:
    Pass() = default;
    Pass(Pass&& other) noexcept : gate_(other.gate_), slot_(other.slot_), epoch_(other.epoch_) {
      other.gate_ = nullptr;
    }
    Pass& operator=(Pass&& other) noexcept;
    Pass(const Pass&) = delete;
    Pass& operator=(const Pass&) = delete;
    ~Pass() { Release(); }
    void Release();
    // The slot, and the epoch of the map it was let in by: what a forward carries, so that
    // the business can refuse the write of a former owner (its per-slot fence).
    uint32_t slot() const { return slot_; }
    uint64_t epoch() const { return epoch_; }

   private:
    friend class ShardGate;
    Pass(ShardGate* gate, uint32_t slot, uint64_t epoch)
        : gate_(gate), slot_(slot), epoch_(epoch) {}
    ShardGate* gate_ = nullptr;
    uint32_t slot_ = 0;
    uint64_t epoch_ = 0;
  };

  // A pass for a slot this shard may write; the refusal otherwise.
  absl::StatusOr<Pass> Enter(uint32_t slot);
  // Whether this shard may answer for `slot` now (the same refusals), without a pass.
  absl::Status Check(uint32_t slot) const;

  // Adopts `map` if it is newer (the same map again is a no-op; another map at the held
  // epoch is FAILED_PRECONDITION EPOCH_CONFLICT, an older one FAILED_PRECONDITION
  // STALE_EPOCH), keeps it on disk, then waits up to `drain_timeout_ms` until no pass is
  // held for a slot this shard may no longer write (DEADLINE_EXCEEDED past it; the map
  // stays adopted). Returns the epoch held.
  absl::StatusOr<uint64_t> Adopt(const SlotMap& map, int64_t drain_timeout_ms);

  // The conditions of a move's steps over slots [first, last] (FAILED_PRECONDITION
  // otherwise): an export needs them moving away from this shard with no work left on them
  // (SLOTS_NOT_MOVING_FROM_HERE, DRAINING_SLOTS); an import needs them moving here
  // (SLOTS_NOT_MOVING_HERE); a drop needs them neither owned nor moving here
  // (SLOTS_STILL_HERE). INVALID_ARGUMENT for a range outside the slots.
  absl::Status CheckExport(uint32_t first, uint32_t last) const;
  absl::Status CheckImport(uint32_t first, uint32_t last) const;
  absl::Status CheckDrop(uint32_t first, uint32_t last) const;

  std::shared_ptr<const SlotMap> map() const;
  const std::string& shard() const { return shard_; }
  // Passes held now, over all slots.
  int64_t in_flight() const;

 private:
  ShardGate(std::string shard, std::string kept_file, SlotMap map);
  absl::Status CheckLocked(uint32_t slot) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void Leave(uint32_t slot);

  const std::string shard_;
  const std::string kept_file_;
  absl::Mutex adopt_mu_;  // one adoption at a time (each writes the kept file)
  mutable absl::Mutex mu_;
  std::shared_ptr<const SlotMap> map_ ABSL_GUARDED_BY(mu_);
  std::vector<int32_t> in_flight_ ABSL_GUARDED_BY(mu_);
};

}  // namespace eonce

#endif  // EONCE_DEDUPE_SIDECAR_SHARD_GATE_H_
