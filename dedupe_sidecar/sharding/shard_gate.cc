#include "dedupe_sidecar/sharding/shard_gate.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/base/log.h"
#include "common/coord/slot_map_io.h"
#include "common/base/status.h"

namespace eonce {
namespace {

// The hint given with SLOT_MIGRATING: a move's freeze lasts as long as the copy of one
// run of slots, usually well under a second.
constexpr int64_t kMigratingRetryMs = 100;
constexpr int64_t kMaxDrainMs = 60'000;
constexpr int64_t kDefaultDrainMs = 10'000;

}  // namespace

ShardGate::Pass& ShardGate::Pass::operator=(Pass&& other) noexcept {
  if (this != &other) {
    Release();
    gate_ = other.gate_;
    slot_ = other.slot_;
    epoch_ = other.epoch_;
    other.gate_ = nullptr;
  }
  return *this;
}

void ShardGate::Pass::Release() {
  if (gate_ != nullptr) gate_->Leave(slot_);
  gate_ = nullptr;
}

absl::StatusOr<std::unique_ptr<ShardGate>> ShardGate::Open(std::string shard,
                                                           const std::string& kept_file,
                                                           Clock& clock) {
  absl::StatusOr<SlotMap> kept = ReadSlotMapFile(kept_file);
  if (!kept.ok() && kept.status().code() != absl::StatusCode::kNotFound) return kept.status();
  std::shared_ptr<const SlotMap> map;
  if (kept.ok()) {
    map = std::make_shared<const SlotMap>(std::move(*kept));
    LogInfo("slot map: starting from the map adopted before",
            {{"shard", shard}, {"epoch", absl::StrCat(map->epoch())}});
  }
  return std::unique_ptr<ShardGate>(
      new ShardGate(std::move(shard), kept_file, clock, std::move(map)));
}

ShardGate::ShardGate(std::string shard, std::string kept_file, Clock& clock,
                     std::shared_ptr<const SlotMap> map)
    : shard_(std::move(shard)),
      kept_file_(std::move(kept_file)),
      clock_(clock),
      map_(std::move(map)),
      in_flight_(kSlotCount, 0) {}

void ShardGate::SetServeUntilMs(int64_t serve_until_ms) {
  serve_until_ms_.store(serve_until_ms, std::memory_order_release);
}

absl::Status ShardGate::CheckLocked(uint32_t slot) const {
  // Checked under mu_, like the map: a pass let in here is let in by a live lease.
  const int64_t serve_until = serve_until_ms();
  if (map_ == nullptr || clock_.NowMs() >= serve_until) {
    return WithRetryAfter(
        Error(absl::StatusCode::kUnavailable, "NOT_LEASED",
              absl::StrCat("shard ", shard_, " does not hold its lease now",
                           map_ == nullptr ? " (and no slot map yet)" : "",
                           "; nothing was written, retry shortly")),
        kMigratingRetryMs * 10);
  }
  return CheckMapLocked(slot);
}

absl::Status ShardGate::CheckMapLocked(uint32_t slot) const {
  const SlotMap& map = *map_;
  const std::string& owner = map.OwnerOf(slot);
  // Moving away from here, or to here: neither end takes it until the move flips.
  if (map.Migrating(slot) && (owner == shard_ || map.MovingTo(slot) == shard_)) {
    absl::Status moving = WithRetryAfter(
        Error(absl::StatusCode::kUnavailable, "SLOT_MIGRATING",
              absl::StrCat("slot ", slot, " is moving from shard ", owner, " to ",
                           map.MovingTo(slot), " (epoch ", map.epoch(),
                           "); nothing was written, retry shortly")),
        kMigratingRetryMs);
    moving = WithErrorMetadata(moving, "slot", absl::StrCat(slot));
    return WithErrorMetadata(moving, "epoch", absl::StrCat(map.epoch()));
  }
  if (owner != shard_) {
    absl::Status moved =
        Error(absl::StatusCode::kUnavailable, "SLOT_MOVED",
              absl::StrCat("slot ", slot, " belongs to shard ", owner, " at ",
                           map.AddressOf(owner), " (epoch ", map.epoch(),
                           "); nothing was written, send it there"));
    moved = WithErrorMetadata(moved, "slot", absl::StrCat(slot));
    moved = WithErrorMetadata(moved, "owner", owner);
    moved = WithErrorMetadata(moved, "owner_address", map.AddressOf(owner));
    return WithErrorMetadata(moved, "epoch", absl::StrCat(map.epoch()));
  }
  return absl::OkStatus();
}

absl::StatusOr<ShardGate::Pass> ShardGate::Enter(uint32_t slot) {
  absl::MutexLock lock(&mu_);
  EONCE_RETURN_IF_ERROR(CheckLocked(slot));
  ++in_flight_[slot];
  return Pass(this, slot, map_->epoch());
}

absl::Status ShardGate::Check(uint32_t slot) const {
  absl::ReaderMutexLock lock(&mu_);
  return CheckLocked(slot);
}

void ShardGate::Leave(uint32_t slot) {
  absl::MutexLock lock(&mu_);
  --in_flight_[slot];
}

absl::StatusOr<uint64_t> ShardGate::Adopt(const SlotMap& map, int64_t drain_timeout_ms) {
  if (drain_timeout_ms < 0 || drain_timeout_ms > kMaxDrainMs) {
    return absl::InvalidArgumentError(
        absl::StrCat("drain_timeout_ms: 0..", kMaxDrainMs, ", not ", drain_timeout_ms));
  }
  if (drain_timeout_ms == 0) drain_timeout_ms = kDefaultDrainMs;
  absl::MutexLock adopting(&adopt_mu_);
  std::shared_ptr<const SlotMap> held = this->map();
  if (held == nullptr) {
    EONCE_RETURN_IF_ERROR(WriteSlotMapFile(kept_file_, map));
    absl::MutexLock lock(&mu_);
    map_ = std::make_shared<const SlotMap>(map);
    return map_->epoch();
  }
  if (map.epoch() < held->epoch()) {
    return Error(absl::StatusCode::kFailedPrecondition, "STALE_EPOCH",
                 absl::StrCat("shard ", shard_, " holds epoch ", held->epoch(),
                              "; a map at epoch ", map.epoch(), " is older"));
  }
  if (map.epoch() == held->epoch()) {
    if (map.proto().SerializeAsString() != held->proto().SerializeAsString()) {
      return Error(absl::StatusCode::kFailedPrecondition, "EPOCH_CONFLICT",
                   absl::StrCat("shard ", shard_, " holds another map at epoch ", map.epoch()));
    }
  } else {
    // Kept before it is used: once a command is refused under this map, a restart must
    // not let it in again.
    EONCE_RETURN_IF_ERROR(WriteSlotMapFile(kept_file_, map));
    absl::MutexLock lock(&mu_);
    map_ = std::make_shared<const SlotMap>(map);
  }
  // Wait for the work let in under an older map on slots this shard may no longer write.
  auto drained = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (uint32_t slot = 0; slot < kSlotCount; ++slot) {
      if (in_flight_[slot] > 0 && !CheckMapLocked(slot).ok()) return false;
    }
    return true;
  };
  absl::MutexLock lock(&mu_);
  if (!mu_.AwaitWithTimeout(absl::Condition(&drained),
                            absl::Milliseconds(drain_timeout_ms))) {
    return Error(absl::StatusCode::kDeadlineExceeded, "DRAINING_SLOTS",
                 absl::StrCat("epoch ", map.epoch(), " is adopted by shard ", shard_,
                              ", but commands let in before it still run on its moved slots; "
                              "ask again"));
  }
  return map_->epoch();
}

void ShardGate::SetStoreReader(std::function<absl::StatusOr<SlotMap>()> read_store) {
  absl::MutexLock lock(&reader_mu_);
  read_store_ = std::move(read_store);
}

absl::StatusOr<uint64_t> ShardGate::AdoptFromStore(uint64_t pushed_epoch,
                                                   int64_t drain_timeout_ms) {
  std::function<absl::StatusOr<SlotMap>()> read;
  {
    absl::MutexLock lock(&reader_mu_);
    read = read_store_;
  }
  if (!read) {
    return Error(absl::StatusCode::kFailedPrecondition, "NOT_IN_STORE",
                 absl::StrCat("shard ", shard_, " has no coordination store to check a pushed map "
                              "against"));
  }
  EONCE_ASSIGN_OR_RETURN(SlotMap current, read());
  if (current.epoch() < pushed_epoch) {
    return Error(absl::StatusCode::kFailedPrecondition, "NOT_IN_STORE",
                 absl::StrCat("the map pushed at epoch ", pushed_epoch,
                              " is not in the coordination store, which holds epoch ",
                              current.epoch(), "; a map is adopted only from the store"));
  }
  return Adopt(current, drain_timeout_ms);
}

namespace {

absl::Status CheckRange(uint32_t first, uint32_t last) {
  if (first > last || last >= kSlotCount) {
    return absl::InvalidArgumentError(absl::StrCat("slots ", first, "-", last,
                                                   " are not a range within 0-", kSlotCount - 1));
  }
  return absl::OkStatus();
}

absl::Status NoMap() {
  return Error(absl::StatusCode::kUnavailable, "NO_SLOT_MAP",
               "this shard has not read the slot map yet; retry shortly");
}

absl::Status NotNow(absl::string_view reason, absl::string_view what, uint32_t slot,
                    uint64_t epoch) {
  return Error(absl::StatusCode::kFailedPrecondition, reason,
               absl::StrCat("slot ", slot, " ", what, " at epoch ", epoch));
}

}  // namespace

absl::StatusOr<uint64_t> ShardGate::CheckExport(uint32_t first, uint32_t last) const {
  EONCE_RETURN_IF_ERROR(CheckRange(first, last));
  absl::ReaderMutexLock lock(&mu_);
  if (map_ == nullptr) return NoMap();
  for (uint32_t slot = first; slot <= last; ++slot) {
    if (map_->OwnerOf(slot) != shard_ || !map_->Migrating(slot)) {
      return NotNow("SLOTS_NOT_MOVING_FROM_HERE", "is not moving away from this shard", slot,
                    map_->epoch());
    }
    if (in_flight_[slot] > 0) {
      return NotNow("DRAINING_SLOTS", "still has commands running", slot, map_->epoch());
    }
  }
  return map_->epoch();
}

absl::StatusOr<ShardGate::TransferHold> ShardGate::HoldImport(uint32_t first, uint32_t last,
                                                              uint64_t epoch) {
  return Hold(first, last, epoch, /*import=*/true);
}

absl::StatusOr<ShardGate::TransferHold> ShardGate::HoldDrop(uint32_t first, uint32_t last,
                                                            uint64_t epoch) {
  return Hold(first, last, epoch, /*import=*/false);
}

absl::StatusOr<ShardGate::TransferHold> ShardGate::Hold(uint32_t first, uint32_t last,
                                                        uint64_t epoch, bool import) {
  EONCE_RETURN_IF_ERROR(CheckRange(first, last));
  adopt_mu_.ReaderLock();
  TransferHold hold(&adopt_mu_);  // unlocks on every return below
  absl::ReaderMutexLock lock(&mu_);
  if (map_ == nullptr) return NoMap();
  if (epoch != 0 && map_->epoch() != epoch) {
    return Error(absl::StatusCode::kFailedPrecondition, "STALE_STEP",
                 absl::StrCat("shard ", shard_, " holds epoch ", map_->epoch(),
                              ", not the step's ", epoch,
                              ": the map moved on; read it again"));
  }
  for (uint32_t slot = first; slot <= last; ++slot) {
    if (import && map_->MovingTo(slot) != shard_) {
      // MovingTo is empty once the move flipped: this shard owns the run then.
      return NotNow("SLOTS_NOT_MOVING_HERE", "is not moving to this shard (or has flipped)",
                    slot, map_->epoch());
    }
    if (!import && map_->OwnerOf(slot) == shard_) {
      return NotNow("SLOTS_STILL_HERE", "is owned by this shard", slot, map_->epoch());
    }
  }
  return hold;
}

std::shared_ptr<const SlotMap> ShardGate::map() const {
  absl::ReaderMutexLock lock(&mu_);
  return map_;
}

uint64_t ShardGate::epoch() const {
  absl::ReaderMutexLock lock(&mu_);
  return map_ == nullptr ? 0 : map_->epoch();
}

int64_t ShardGate::in_flight() const {
  absl::ReaderMutexLock lock(&mu_);
  int64_t total = 0;
  for (int32_t n : in_flight_) total += n;
  return total;
}

}  // namespace eonce
