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
// Maps come from the coordination store (common/coord/map_store.h) through the sidecar's
// coordination thread, and from a mover's AdoptSlotMap push; only a newer one is taken. The
// gate never goes back to an older map: an adopted map is kept in the sidecar's data
// directory before Adopt returns (a cache, read at start; the store stays the truth).
//
// A command is let in only while this process may serve its shard: until the time
// (ServeUntil, on the injected clock) that the coordination thread sets from its lease
// (UNAVAILABLE, NOT_LEASED, past it). A lease that lapsed may already be another
// process's. Thread-safe.
#ifndef EONCE_DEDUPE_SIDECAR_SHARDING_SHARD_GATE_H_
#define EONCE_DEDUPE_SIDECAR_SHARDING_SHARD_GATE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/base/clock.h"
#include "common/coord/slots.h"

namespace eonce {

class ShardGate {
 public:
  // `shard`: this sidecar's shard id. `kept_file`: where adopted maps are kept (in the
  // data directory); the map there, if any, is held from the start. Nothing is let in
  // before SetServeUntilMs.
  static absl::StatusOr<std::unique_ptr<ShardGate>> Open(std::string shard,
                                                         const std::string& kept_file,
                                                         Clock& clock);

  // Commands are let in until `serve_until_ms` on the clock (0: not at all). Set by the
  // one thread that holds the shard's lease, once the map it read is adopted.
  void SetServeUntilMs(int64_t serve_until_ms);
  int64_t serve_until_ms() const { return serve_until_ms_.load(std::memory_order_acquire); }

  // Held by a move's import or drop while it writes: no map is adopted meanwhile, so the
  // step's check holds until it is done.
  class TransferHold {
   public:
    TransferHold(TransferHold&& other) noexcept : mu_(other.mu_) { other.mu_ = nullptr; }
    TransferHold(const TransferHold&) = delete;
    TransferHold& operator=(const TransferHold&) = delete;
    TransferHold& operator=(TransferHold&&) = delete;
    ~TransferHold() {
      if (mu_ != nullptr) mu_->ReaderUnlock();
    }

   private:
    friend class ShardGate;
    explicit TransferHold(absl::Mutex* mu) : mu_(mu) {}
    absl::Mutex* mu_;
  };

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

  // Where a pushed map is checked: the coordination store's current map. Set once, before
  // the sidecar serves (the coordinator does).
  void SetStoreReader(std::function<absl::StatusOr<SlotMap>()> read_store);
  // A mover's push (AdoptSlotMap) of the map at `pushed_epoch`: the pushed contents are
  // never taken on their word (a stale or forged map would make two owners, or, with a
  // huge epoch, refuse every real map after it). The store's current map is adopted
  // instead, as by Adopt, when its epoch is at least `pushed_epoch`; FAILED_PRECONDITION
  // NOT_IN_STORE when the store holds an older one, and the store's error (UNAVAILABLE)
  // when it cannot be read.
  absl::StatusOr<uint64_t> AdoptFromStore(uint64_t pushed_epoch, int64_t drain_timeout_ms);

  // The conditions of a move's steps over slots [first, last] (FAILED_PRECONDITION
  // otherwise): an export needs them moving away from this shard with no work left on them
  // (SLOTS_NOT_MOVING_FROM_HERE, DRAINING_SLOTS); an import needs them moving here and not
  // flipped (SLOTS_NOT_MOVING_HERE: once this shard took the run, an import would write
  // over what it wrote since); a drop needs them not owned here (SLOTS_STILL_HERE: a run
  // moving here, not flipped, may be cleared). An import or a drop with an `epoch` (not 0)
  // also needs the map held to be that epoch's (STALE_STEP). INVALID_ARGUMENT for a range
  // outside the slots. The import and drop checks return a hold kept while they write.
  // The export check returns the epoch of the map it checked (read under the same lock: a
  // map adopted just after must not be the one the business fences the export at).
  absl::StatusOr<uint64_t> CheckExport(uint32_t first, uint32_t last) const;
  absl::StatusOr<TransferHold> HoldImport(uint32_t first, uint32_t last, uint64_t epoch);
  absl::StatusOr<TransferHold> HoldDrop(uint32_t first, uint32_t last, uint64_t epoch);

  // Null until a map is adopted (or was kept by an earlier run).
  std::shared_ptr<const SlotMap> map() const;
  // The epoch held; 0 for none.
  uint64_t epoch() const;
  const std::string& shard() const { return shard_; }
  // Passes held now, over all slots.
  int64_t in_flight() const;

 private:
  ShardGate(std::string shard, std::string kept_file, Clock& clock,
            std::shared_ptr<const SlotMap> map);
  absl::Status CheckLocked(uint32_t slot) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // By the map alone (the lease aside); map_ must not be null.
  absl::Status CheckMapLocked(uint32_t slot) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  absl::StatusOr<TransferHold> Hold(uint32_t first, uint32_t last, uint64_t epoch, bool import);
  void Leave(uint32_t slot);

  const std::string shard_;
  const std::string kept_file_;
  Clock& clock_;
  std::atomic<int64_t> serve_until_ms_{0};
  // One adoption at a time (each writes the kept file); shared by the imports and drops
  // that write meanwhile.
  absl::Mutex adopt_mu_;
  absl::Mutex reader_mu_;
  std::function<absl::StatusOr<SlotMap>()> read_store_ ABSL_GUARDED_BY(reader_mu_);
  mutable absl::Mutex mu_;
  std::shared_ptr<const SlotMap> map_ ABSL_GUARDED_BY(mu_);
  std::vector<int32_t> in_flight_ ABSL_GUARDED_BY(mu_);
};

}  // namespace eonce

#endif  // EONCE_DEDUPE_SIDECAR_SHARDING_SHARD_GATE_H_
