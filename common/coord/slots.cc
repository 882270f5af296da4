#include "common/coord/slots.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/big_endian.h"
#include "common/base/hash.h"
#include "google/protobuf/util/json_util.h"

namespace eonce {
namespace {

absl::Status Invalid(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("slot map: ", what));
}

bool ValidShardId(absl::string_view id) {
  if (id.empty() || id.size() > 63) return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
  });
}

std::string RangeName(uint32_t first, uint32_t last) { return absl::StrCat(first, "-", last); }

// The ranges of `owners` (slot -> shard id), one per run.
void SetRanges(const std::vector<std::string>& owners, v1::SlotMap* proto) {
  proto->clear_ranges();
  uint32_t start = 0;
  for (uint32_t slot = 1; slot <= owners.size(); ++slot) {
    if (slot == owners.size() || owners[slot] != owners[start]) {
      v1::SlotRange* range = proto->add_ranges();
      range->set_first(start);
      range->set_last(slot - 1);
      range->set_shard(owners[start]);
      start = slot;
    }
  }
}

std::vector<std::string> OwnersOf(const SlotMap& map) {
  std::vector<std::string> owners(kSlotCount);
  for (uint32_t slot = 0; slot < kSlotCount; ++slot) owners[slot] = map.OwnerOf(slot);
  return owners;
}

absl::StatusOr<int> FindMigration(const SlotMap& map, uint32_t first, uint32_t last) {
  const auto& migrations = map.proto().migrations();
  for (int i = 0; i < migrations.size(); ++i) {
    if (migrations[i].first() == first && migrations[i].last() == last) return i;
  }
  return absl::NotFoundError(
      absl::StrCat("slot map: no migration of slots ", RangeName(first, last), " at epoch ",
                   map.epoch()));
}

}  // namespace

uint32_t SlotOf(absl::string_view tenant, absl::string_view entity_type,
                absl::string_view entity_id) {
  std::string framed("eonce.slot.v1");
  framed.push_back('\0');
  for (absl::string_view part : {tenant, entity_type, entity_id}) {
    AppendBigEndian(&framed, part.size(), 4);
    framed.append(part.data(), part.size());
  }
  return static_cast<uint32_t>(ReadBigEndian64(Sha256(framed)) % kSlotCount);
}

uint32_t SlotOfCommand(const v1::Command& command) {
  return SlotOf(command.tenant(), command.entity().type(), command.entity().id());
}

absl::StatusOr<SlotMap> SlotMap::FromProto(v1::SlotMap proto) {
  if (proto.epoch() == 0) return Invalid("epoch must be at least 1");
  if (proto.slot_count() != kSlotCount) {
    return Invalid(absl::StrCat("slot_count must be ", kSlotCount, ", not ", proto.slot_count()));
  }
  if (proto.shards().empty() || proto.shards_size() > static_cast<int>(kMaxShards)) {
    return Invalid(absl::StrCat("1..", kMaxShards, " shards are required"));
  }
  if (proto.ranges_size() > static_cast<int>(kMaxSlotRanges) ||
      proto.migrations_size() > static_cast<int>(kSlotCount)) {
    return Invalid("too many ranges or migrations");
  }
  SlotMap map(std::move(proto));
  const v1::SlotMap& p = map.proto_;
  for (const v1::ShardInfo& shard : p.shards()) {
    if (!ValidShardId(shard.id())) {
      return Invalid(absl::StrCat("shard id \"", shard.id(), "\" is not [a-z0-9-]{1,63}"));
    }
    if (shard.address().empty() || shard.address().size() > 256) {
      return Invalid(absl::StrCat("shard ", shard.id(), " needs an address (1..256 bytes)"));
    }
    if (std::find(map.shard_ids_.begin(), map.shard_ids_.end(), shard.id()) !=
        map.shard_ids_.end()) {
      return Invalid(absl::StrCat("shard ", shard.id(), " twice"));
    }
    map.shard_ids_.push_back(shard.id());
  }
  auto index_of = [&](const std::string& id) -> int {
    auto it = std::find(map.shard_ids_.begin(), map.shard_ids_.end(), id);
    return it == map.shard_ids_.end() ? -1 : static_cast<int>(it - map.shard_ids_.begin());
  };
  constexpr uint16_t kNone = 0xffff;
  map.owner_.assign(kSlotCount, kNone);
  for (const v1::SlotRange& range : p.ranges()) {
    if (range.first() > range.last() || range.last() >= kSlotCount) {
      return Invalid(absl::StrCat("range ", RangeName(range.first(), range.last()),
                                  " is not within 0-", kSlotCount - 1));
    }
    int owner = index_of(range.shard());
    if (owner < 0) return Invalid(absl::StrCat("range names unknown shard ", range.shard()));
    for (uint32_t slot = range.first(); slot <= range.last(); ++slot) {
      if (map.owner_[slot] != kNone) {
        return Invalid(absl::StrCat("slot ", slot, " is in two ranges"));
      }
      map.owner_[slot] = static_cast<uint16_t>(owner);
    }
  }
  for (uint32_t slot = 0; slot < kSlotCount; ++slot) {
    if (map.owner_[slot] == kNone) return Invalid(absl::StrCat("slot ", slot, " has no owner"));
  }
  map.moving_to_.assign(kSlotCount, -1);
  std::vector<bool> in_a_move(kSlotCount, false);
  for (const v1::SlotMigration& move : p.migrations()) {
    if (move.first() > move.last() || move.last() >= kSlotCount) {
      return Invalid(absl::StrCat("migration ", RangeName(move.first(), move.last()),
                                  " is not within 0-", kSlotCount - 1));
    }
    if (index_of(move.to_shard()) < 0 || index_of(move.from_shard()) < 0 ||
        move.to_shard() == move.from_shard()) {
      return Invalid(absl::StrCat("migration ", RangeName(move.first(), move.last()),
                                  " names an unknown shard, or the same one twice"));
    }
    // Before the flip the old owner owns the slots; after it, the new one.
    const std::string& owner = move.flipped() ? move.to_shard() : move.from_shard();
    for (uint32_t slot = move.first(); slot <= move.last(); ++slot) {
      if (in_a_move[slot]) return Invalid(absl::StrCat("slot ", slot, " moves twice"));
      in_a_move[slot] = true;
      if (map.OwnerOf(slot) != owner) {
        return Invalid(absl::StrCat("slot ", slot, " moves from ", move.from_shard(), " to ",
                                    move.to_shard(), (move.flipped() ? " (flipped)" : ""),
                                    " but belongs to ", map.OwnerOf(slot)));
      }
      if (!move.flipped()) {
        map.moving_to_[slot] = static_cast<int16_t>(index_of(move.to_shard()));
      }
    }
  }
  return map;
}

absl::StatusOr<SlotMap> SlotMap::FromJson(absl::string_view json) {
  if (json.size() > kMaxSlotMapBytes) return Invalid("larger than 1 MiB");
  v1::SlotMap proto;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  auto parsed = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(json.data(), json.size()), &proto, options);
  if (!parsed.ok()) return Invalid(absl::StrCat("not a SlotMap in JSON: ", parsed.ToString()));
  return FromProto(std::move(proto));
}

absl::StatusOr<SlotMap> SlotMap::Even(const std::vector<v1::ShardInfo>& shards,
                                      uint64_t epoch) {
  if (shards.empty() || shards.size() > kMaxShards) {
    return Invalid(absl::StrCat("1..", kMaxShards, " shards are required"));
  }
  v1::SlotMap proto;
  proto.set_epoch(epoch);
  proto.set_slot_count(kSlotCount);
  std::vector<std::string> owners(kSlotCount);
  for (uint32_t slot = 0; slot < kSlotCount; ++slot) {
    owners[slot] = shards[slot * shards.size() / kSlotCount].id();
  }
  for (const v1::ShardInfo& shard : shards) *proto.add_shards() = shard;
  SetRanges(owners, &proto);
  return FromProto(std::move(proto));
}

std::string SlotMap::ToJson() const {
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(proto_, &json, options);
  return json;
}

const std::string& SlotMap::AddressOf(absl::string_view shard) const {
  static const std::string kNone;
  for (const v1::ShardInfo& info : proto_.shards()) {
    if (info.id() == shard) return info.address();
  }
  return kNone;
}

const std::string& SlotMap::MovingTo(uint32_t slot) const {
  static const std::string kNone;
  return moving_to_[slot] >= 0 ? shard_ids_[moving_to_[slot]] : kNone;
}

uint32_t SlotMap::WritableSlotsOf(absl::string_view shard) const {
  uint32_t count = 0;
  for (uint32_t slot = 0; slot < kSlotCount; ++slot) {
    if (OwnerOf(slot) == shard && !Migrating(slot)) ++count;
  }
  return count;
}

absl::StatusOr<SlotMap> BeginMove(const SlotMap& map, uint32_t first, uint32_t last,
                                  const std::string& to, const std::string& to_address) {
  if (first > last || last >= kSlotCount) {
    return Invalid(absl::StrCat("slots ", RangeName(first, last), " are not within 0-",
                                kSlotCount - 1));
  }
  v1::SlotMap next = map.proto();
  if (!map.HasShard(to)) {
    if (to_address.empty()) {
      return Invalid(absl::StrCat("shard ", to, " is not in the map; give its address"));
    }
    v1::ShardInfo* added = next.add_shards();
    added->set_id(to);
    added->set_address(to_address);
  }
  const std::string& from = map.OwnerOf(first);
  for (uint32_t slot = first; slot <= last; ++slot) {
    if (map.OwnerOf(slot) != from) {
      return Invalid(absl::StrCat("slots ", RangeName(first, last),
                                  " belong to more than one shard; move them one run at a time"));
    }
  }
  for (const v1::SlotMigration& move : map.proto().migrations()) {
    if (move.first() <= last && first <= move.last()) {
      return Invalid(absl::StrCat("slots ", RangeName(move.first(), move.last()),
                                  " are already in a move (finish or abort it first)"));
    }
  }
  if (from == to) return Invalid(absl::StrCat("slots ", RangeName(first, last), " are on ", to));
  v1::SlotMigration* move = next.add_migrations();
  move->set_first(first);
  move->set_last(last);
  move->set_from_shard(from);
  move->set_to_shard(to);
  next.set_epoch(map.epoch() + 1);
  return SlotMap::FromProto(std::move(next));
}

absl::StatusOr<SlotMap> FinishMove(const SlotMap& map, uint32_t first, uint32_t last) {
  absl::StatusOr<int> index = FindMigration(map, first, last);
  if (!index.ok()) return index.status();
  v1::SlotMap next = map.proto();
  v1::SlotMigration* move = next.mutable_migrations(*index);
  if (move->flipped()) return Invalid(absl::StrCat("slots ", RangeName(first, last), " flipped"));
  std::vector<std::string> owners = OwnersOf(map);
  for (uint32_t slot = first; slot <= last; ++slot) owners[slot] = move->to_shard();
  move->set_flipped(true);
  SetRanges(owners, &next);
  next.set_epoch(map.epoch() + 1);
  return SlotMap::FromProto(std::move(next));
}

absl::StatusOr<SlotMap> ReleaseMove(const SlotMap& map, uint32_t first, uint32_t last) {
  absl::StatusOr<int> index = FindMigration(map, first, last);
  if (!index.ok()) return index.status();
  if (!map.proto().migrations(*index).flipped()) {
    return Invalid(absl::StrCat("slots ", RangeName(first, last), " have not flipped yet"));
  }
  v1::SlotMap next = map.proto();
  next.mutable_migrations()->DeleteSubrange(*index, 1);
  next.set_epoch(map.epoch() + 1);
  return SlotMap::FromProto(std::move(next));
}

absl::StatusOr<SlotMap> AbortMove(const SlotMap& map, uint32_t first, uint32_t last) {
  absl::StatusOr<int> index = FindMigration(map, first, last);
  if (!index.ok()) return index.status();
  if (map.proto().migrations(*index).flipped()) {
    return Invalid(absl::StrCat("slots ", RangeName(first, last),
                                " already flipped: the move can only be released"));
  }
  v1::SlotMap next = map.proto();
  next.mutable_migrations()->DeleteSubrange(*index, 1);
  next.set_epoch(map.epoch() + 1);
  return SlotMap::FromProto(std::move(next));
}

absl::StatusOr<v1::SlotMigration> MigrationOf(const SlotMap& map, uint32_t first,
                                              uint32_t last) {
  absl::StatusOr<int> index = FindMigration(map, first, last);
  if (!index.ok()) return index.status();
  return map.proto().migrations(*index);
}

}  // namespace eonce
