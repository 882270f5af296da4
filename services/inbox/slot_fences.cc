#include "services/inbox/slot_fences.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "common/base/big_endian.h"
#include "common/command/command.h"
#include "common/base/status.h"

namespace eonce {
namespace {

std::string FenceKey(uint32_t slot) {
  std::string key;
  AppendBigEndian(&key, slot, 2);
  return key;
}

absl::Status Fenced(uint32_t slot, uint64_t epoch, uint64_t fence) {
  return Error(absl::StatusCode::kFailedPrecondition, kSlotFencedReason,
               epoch == 0 ? absl::StrCat("slot ", slot, " is fenced at epoch ", fence,
                                         " and the write names no epoch; nothing was applied")
                          : absl::StrCat("slot ", slot, " is fenced at epoch ", fence,
                                         ", the write is of epoch ", epoch,
                                         "; nothing was applied"));
}

}  // namespace

SlotFences::SlotFences(RocksStore& store) : store_(store) {
  std::unique_ptr<rocksdb::Iterator> it = store_.NewIterator(kCf);
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    if (it->key().size() != 2) continue;
    const uint32_t slot = static_cast<uint32_t>(
        ReadBigEndian64(absl::string_view(it->key().data(), it->key().size())));
    if (slot >= kSlotCount) continue;
    // The epoch, and a ninth byte when the slot was handed off.
    const size_t size = it->value().size();
    fences_[slot] = size == 8 || size == 9
                        ? ReadBigEndian64(absl::string_view(it->value().data(), 8))
                        : std::numeric_limits<uint64_t>::max();
    handed_off_[slot] = size == 9;
  }
}

std::string SlotFences::LockKey(uint32_t slot) { return absl::StrCat("slot:", slot); }

void SlotFences::Put(rocksdb::WriteBatch* batch, uint32_t slot, uint64_t fence,
                     bool handed_off) const {
  std::string value = BigEndian64(fence);
  if (handed_off) value.push_back('h');
  batch->Put(store_.cf(kCf), FenceKey(slot), value);
}

absl::StatusOr<uint64_t> SlotFences::Admit(uint32_t slot, uint64_t epoch,
                                           rocksdb::WriteBatch* batch) const {
  const uint64_t held = fence(slot);
  // A slot handed off at its fence's epoch takes no write of that epoch either: no map of
  // it lets a shard write the slot here (it is moving, or it has moved).
  if (epoch < held || (epoch == 0 && held > 0) || (handed_off(slot) && epoch == held)) {
    return Fenced(slot, epoch, held);
  }
  if (epoch > held) Put(batch, slot, epoch);
  return epoch;
}

absl::Status SlotFences::Raise(uint32_t first, uint32_t last, uint64_t epoch, const char* what) {
  if (epoch == 0) {
    return Error(absl::StatusCode::kInvalidArgument, "INVALID_FIELD",
                 absl::StrCat("epoch: required (the slot map's, for the slots' fence)"));
  }
  rocksdb::WriteBatch batch;
  for (uint32_t slot = first; slot <= last; ++slot) {
    if (fence(slot) > epoch) return Fenced(slot, epoch, fence(slot));
    if (fence(slot) < epoch || !handed_off(slot)) Put(&batch, slot, epoch, /*handed_off=*/true);
  }
  if (batch.Count() == 0) return absl::OkStatus();
  // Synced: the fence must outlive a power cut before the rows are read or deleted, or a
  // late write could land after the copy once the store came back.
  EONCE_RETURN_IF_ERROR(store_.Write(&batch, /*sync=*/true, what));
  for (uint32_t slot = first; slot <= last; ++slot) {
    fences_[slot].store(epoch, std::memory_order_release);
    handed_off_[slot].store(true, std::memory_order_release);
  }
  return absl::OkStatus();
}

absl::Status SlotFences::AdmitRange(uint32_t first, uint32_t last, uint64_t epoch,
                                    rocksdb::WriteBatch* batch) const {
  if (epoch == 0) {
    return Error(absl::StatusCode::kInvalidArgument, "INVALID_FIELD",
                 "epoch: required (the slot map's, for the slots' fence)");
  }
  for (uint32_t slot = first; slot <= last; ++slot) {
    if (fence(slot) > epoch) return Fenced(slot, epoch, fence(slot));
    // Handed off: an abort may leave this copy behind, never to be the slot's; Hold takes
    // it once the map gives the slot here.
    if (fence(slot) < epoch || !handed_off(slot)) Put(batch, slot, epoch, /*handed_off=*/true);
  }
  return absl::OkStatus();
}

void SlotFences::KeepRange(uint32_t first, uint32_t last, uint64_t epoch) {
  for (uint32_t slot = first; slot <= last; ++slot) {
    handed_off_[slot].store(true, std::memory_order_release);
    fences_[slot].store(epoch, std::memory_order_release);
  }
}

absl::StatusOr<int64_t> SlotFences::Hold(uint32_t first, uint32_t last, uint64_t epoch) {
  if (epoch == 0) {
    return Error(absl::StatusCode::kInvalidArgument, "INVALID_FIELD",
                 "epoch: required (the slot map's, for the slots' fence)");
  }
  rocksdb::WriteBatch batch;
  for (uint32_t slot = first; slot <= last; ++slot) {
    if (fence(slot) < epoch) Put(&batch, slot, epoch);
  }
  if (batch.Count() == 0) return 0;
  // Synced like Raise: a slot counted again must not turn handed off after a power cut
  // while its owner writes it.
  EONCE_RETURN_IF_ERROR(store_.Write(&batch, /*sync=*/true, "hold slots"));
  int64_t held = 0;
  for (uint32_t slot = first; slot <= last; ++slot) {
    if (fence(slot) >= epoch) continue;
    handed_off_[slot].store(false, std::memory_order_release);
    fences_[slot].store(epoch, std::memory_order_release);
    ++held;
  }
  return held;
}

bool IsSlotFenced(const absl::Status& status) {
  return status.code() == absl::StatusCode::kFailedPrecondition &&
         ReasonOf(status) == kSlotFencedReason;
}

}  // namespace eonce
