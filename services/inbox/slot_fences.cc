#include "services/inbox/slot_fences.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "common/big_endian.h"
#include "common/command.h"
#include "common/status.h"

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
    fences_[slot] = it->value().size() == 8
                        ? ReadBigEndian64(absl::string_view(it->value().data(), 8))
                        : std::numeric_limits<uint64_t>::max();
  }
}

std::string SlotFences::LockKey(uint32_t slot) { return absl::StrCat("slot:", slot); }

void SlotFences::Put(rocksdb::WriteBatch* batch, uint32_t slot, uint64_t fence) const {
  batch->Put(store_.cf(kCf), FenceKey(slot), BigEndian64(fence));
}

absl::StatusOr<uint64_t> SlotFences::Admit(uint32_t slot, uint64_t epoch,
                                           rocksdb::WriteBatch* batch) const {
  const uint64_t held = fence(slot);
  if (epoch < held || (epoch == 0 && held > 0)) return Fenced(slot, epoch, held);
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
    if (fence(slot) < epoch) Put(&batch, slot, epoch);
  }
  if (batch.Count() == 0) return absl::OkStatus();
  // Synced: the fence must outlive a power cut before the rows are read or deleted, or a
  // late write could land after the copy once the store came back.
  EONCE_RETURN_IF_ERROR(store_.Write(&batch, /*sync=*/true, what));
  KeepRange(first, last, epoch);
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
    if (fence(slot) < epoch) Put(batch, slot, epoch);
  }
  return absl::OkStatus();
}

void SlotFences::KeepRange(uint32_t first, uint32_t last, uint64_t epoch) {
  for (uint32_t slot = first; slot <= last; ++slot) {
    if (fence(slot) < epoch) Keep(slot, epoch);
  }
}

bool IsSlotFenced(const absl::Status& status) {
  return status.code() == absl::StatusCode::kFailedPrecondition &&
         ReasonOf(status) == kSlotFencedReason;
}

}  // namespace eonce
