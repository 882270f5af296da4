// SlotFences: each slot's fence in a business's store, the slot-map epoch below which no
// write of the slot may commit any more.
//
// A sharded sidecar's forward carries the epoch of the slot map it was admitted by. When a
// slot moves, the business raises the slot's fence to the move's epoch before it exports
// the slot's data or drops it (Raise, synced): a write of the former owner still in flight
// cannot land after the copy or the drop, Admit refuses it (FAILED_PRECONDITION
// SLOT_FENCED, nothing applied). A write with a newer epoch raises the fence in its own
// batch, so that a stale copy imported after the new owner served is refused too. A write
// without an epoch is refused for a slot that has a fence: only unsharded deployments send
// none, and they never raise one.
//
// A fence that an export, a drop or an import raised also marks its slot handed off: this
// store's copy of the slot is not the slot's (a business's totals leave it out, its relay
// skips its follow-ups; see the ledger's GetTotal). An import too: the copy becomes the
// slot's only once the map gives it here, and an abort may leave it behind. A write of a
// newer epoch, or Hold (the sidecar owns the slot at a newer epoch: an abort gave it back,
// or the flip gave it here), takes the slot back.
//
// Kept in the store (one key per fenced slot in column family kCf) and in memory, loaded
// at construction. Thread-safety: reads are atomic; the caller serializes each slot's
// Admit, batch write and Keep, and its Raise, under the slot's lock (the Inbox takes
// LockKey(slot) among its striped locks, in the same critical section as the effect's
// write). The store must outlive it.
#ifndef EONCE_SERVICES_INBOX_SLOT_FENCES_H_
#define EONCE_SERVICES_INBOX_SLOT_FENCES_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "common/store/rocks.h"
#include "common/coord/slots.h"
#include "rocksdb/write_batch.h"

namespace eonce {

class SlotFences {
 public:
  static constexpr char kCf[] = "slot_fences";

  // Loads every fence kept in `store`; a fence that does not decode fences its slot
  // against every epoch (an operator must look), rather than let a stale write in.
  explicit SlotFences(RocksStore& store);

  // The key under which a caller locks `slot` (StripedLocks).
  static std::string LockKey(uint32_t slot);

  uint64_t fence(uint32_t slot) const { return fences_[slot].load(std::memory_order_acquire); }
  bool handed_off(uint32_t slot) const {
    return handed_off_[slot].load(std::memory_order_acquire);
  }

  // Whether a write of `slot` claiming `epoch` (0: none) may commit, under the slot's lock:
  // the fence to Keep once `batch` is written (raised into `batch` when `epoch` is above
  // it), or FAILED_PRECONDITION SLOT_FENCED (below the fence, or at it once handed off).
  absl::StatusOr<uint64_t> Admit(uint32_t slot, uint64_t epoch, rocksdb::WriteBatch* batch) const;
  // After the batch that Admit raised a fence in was written.
  void Keep(uint32_t slot, uint64_t fence) {
    if (fence > this->fence(slot)) handed_off_[slot].store(false, std::memory_order_release);
    fences_[slot].store(fence, std::memory_order_release);
  }

  // Export and drop, under the locks of [first, last]: every fence of the range up to
  // `epoch`, and every slot of it handed off, synced before it returns; SLOT_FENCED if a
  // fence is already above it (the range has moved on since), INVALID_ARGUMENT for
  // epoch 0.
  absl::Status Raise(uint32_t first, uint32_t last, uint64_t epoch, const char* what);
  // Import, under the locks of [first, last]: SLOT_FENCED if a fence of the range is above
  // `epoch`; otherwise adds the raise of every lower one, every slot of the range handed
  // off, to `batch` (KeepRange after).
  absl::Status AdmitRange(uint32_t first, uint32_t last, uint64_t epoch,
                          rocksdb::WriteBatch* batch) const;
  void KeepRange(uint32_t first, uint32_t last, uint64_t epoch);
  // The sidecar owns [first, last] at `epoch`, under the locks of the range: every slot
  // fenced below it is raised to it and held (not handed off), synced; a slot at it (held,
  // or handed off by an export, drop or import of that epoch, which no owning map shares)
  // or above it is left. Returns how many slots were taken; INVALID_ARGUMENT for epoch 0.
  absl::StatusOr<int64_t> Hold(uint32_t first, uint32_t last, uint64_t epoch);

 private:
  void Put(rocksdb::WriteBatch* batch, uint32_t slot, uint64_t fence,
           bool handed_off = false) const;

  RocksStore& store_;
  std::array<std::atomic<uint64_t>, kSlotCount> fences_{};
  std::array<std::atomic<bool>, kSlotCount> handed_off_{};
};

// Whether `status` is a refusal by a slot's fence (nothing was applied).
bool IsSlotFenced(const absl::Status& status);

}  // namespace eonce

#endif  // EONCE_SERVICES_INBOX_SLOT_FENCES_H_
