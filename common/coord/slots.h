// Hash slots and the slot map (proto/eonce/v1/slots.proto): which shard owns a command.
//
// SlotOf is the one rule that places a command; the agent routes by it and the sidecar
// checks it, so both must agree (a foreign client can compute it from slots.proto).
// SlotMap is an immutable, validated map with the owner of every slot at hand; the move
// steps (BeginMove, FinishMove, AbortMove) each return the next map, one epoch on.
#ifndef EONCE_COMMON_COORD_SLOTS_H_
#define EONCE_COMMON_COORD_SLOTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "eonce/v1/command.pb.h"
#include "eonce/v1/slots.pb.h"

namespace eonce {

inline constexpr uint32_t kSlotCount = 1024;
inline constexpr size_t kMaxShards = 256;
inline constexpr size_t kMaxSlotRanges = 4096;
inline constexpr size_t kMaxSlotMapBytes = 1 << 20;

// Version 1 of the slot rule (slots.proto).
uint32_t SlotOf(absl::string_view tenant, absl::string_view entity_type,
                absl::string_view entity_id);
// The slot of a command: its tenant and entity.
uint32_t SlotOfCommand(const v1::Command& command);

class SlotMap {
 public:
  // INVALID_ARGUMENT naming what is wrong: the epoch, a shard, a range that overlaps or
  // leaves a slot without an owner, a migration that does not start at the owner.
  static absl::StatusOr<SlotMap> FromProto(v1::SlotMap proto);
  static absl::StatusOr<SlotMap> FromJson(absl::string_view json);
  // `shards` own equal runs of slots, in order, at `epoch`.
  static absl::StatusOr<SlotMap> Even(const std::vector<v1::ShardInfo>& shards,
                                      uint64_t epoch = 1);

  uint64_t epoch() const { return proto_.epoch(); }
  const v1::SlotMap& proto() const { return proto_; }
  std::string ToJson() const;

  // The shard that owns `slot` (< kSlotCount).
  const std::string& OwnerOf(uint32_t slot) const { return shard_ids_[owner_[slot]]; }
  // The address of a shard named in the map; "" for one that is not.
  const std::string& AddressOf(absl::string_view shard) const;
  // Whether `slot` is in a migration (and so refused by every shard).
  bool Migrating(uint32_t slot) const { return moving_to_[slot] >= 0; }
  // The shard a migrating slot moves to; "" for a slot that is not moving.
  const std::string& MovingTo(uint32_t slot) const;
  bool HasShard(absl::string_view shard) const { return !AddressOf(shard).empty(); }
  // The slots `shard` owns and that are not in migration.
  uint32_t WritableSlotsOf(absl::string_view shard) const;

 private:
  explicit SlotMap(v1::SlotMap proto) : proto_(std::move(proto)) {}

  v1::SlotMap proto_;
  std::vector<std::string> shard_ids_;
  std::vector<uint16_t> owner_;  // slot -> index in shard_ids_
  std::vector<int16_t> moving_to_;  // slot -> index in shard_ids_, -1 when not moving
};

// Slots [first, last] of `map` start moving to `to` (a shard in the map, or added with
// `to_address`): one epoch on, a migration entry, the owner unchanged. Every slot must
// belong to one shard other than `to`, and none may already be moving.
absl::StatusOr<SlotMap> BeginMove(const SlotMap& map, uint32_t first, uint32_t last,
                                  const std::string& to, const std::string& to_address = "");
// The migration of exactly [first, last] flips: its `to` shard owns and takes the slots,
// and the entry stays, flipped, until ReleaseMove: one epoch on.
absl::StatusOr<SlotMap> FinishMove(const SlotMap& map, uint32_t first, uint32_t last);
// A flipped migration's entry goes once its old owner dropped its copy: one epoch on.
absl::StatusOr<SlotMap> ReleaseMove(const SlotMap& map, uint32_t first, uint32_t last);
// The migration of exactly [first, last], not yet flipped, ends with the owner unchanged:
// one epoch on.
absl::StatusOr<SlotMap> AbortMove(const SlotMap& map, uint32_t first, uint32_t last);
// The migration of exactly [first, last]; NOT_FOUND when there is none.
absl::StatusOr<v1::SlotMigration> MigrationOf(const SlotMap& map, uint32_t first, uint32_t last);

}  // namespace eonce

#endif  // EONCE_COMMON_COORD_SLOTS_H_
