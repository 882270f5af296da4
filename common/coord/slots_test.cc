// The slot rule, the slot map's validation and move steps, and the map file.
#include "common/coord/slots.h"

#include <fstream>
#include <map>

#include "common/coord/slot_map_io.h"
#include "common/base/status.h"
#include "gtest/gtest.h"
#include "tests/util/temp_dir.h"

namespace eonce {
namespace {

v1::ShardInfo Shard(const std::string& id) {
  v1::ShardInfo shard;
  shard.set_id(id);
  shard.set_address(id + ":7000");
  return shard;
}

SlotMap Three() {
  absl::StatusOr<SlotMap> map = SlotMap::Even({Shard("s0"), Shard("s1"), Shard("s2")});
  EXPECT_TRUE(map.ok()) << map.status();
  return *map;
}

TEST(SlotOfTest, FollowsTheRuleInSlotsProto) {
  // Computed from slots.proto's rule with Python's hashlib, so that a client written in
  // another language can check its own implementation against the same values.
  EXPECT_EQ(SlotOf("acme", "account", "alice"), 694u);
  EXPECT_EQ(SlotOf("acme", "account", "bob"), 30u);
  EXPECT_EQ(SlotOf("globex", "account", "alice"), 131u);
  // Each part is length-prefixed: moving a byte between parts moves the slot.
  EXPECT_EQ(SlotOf("ab", "c", "d"), 812u);
  EXPECT_EQ(SlotOf("a", "bc", "d"), 881u);
}

TEST(SlotOfTest, ACommandsSlotIsItsTenantAndEntity) {
  v1::Command command;
  command.set_tenant("acme");
  command.mutable_entity()->set_type("account");
  command.mutable_entity()->set_id("alice");
  command.set_command_id("c1");
  EXPECT_EQ(SlotOfCommand(command), SlotOf("acme", "account", "alice"));
  command.set_command_id("c2");  // another command for the same entity: the same slot
  EXPECT_EQ(SlotOfCommand(command), SlotOf("acme", "account", "alice"));
}

TEST(SlotOfTest, SpreadsEntitiesOverTheSlots) {
  std::map<uint32_t, int> quarters;
  for (int i = 0; i < 8000; ++i) {
    quarters[SlotOf("acme", "account", "a" + std::to_string(i)) / (kSlotCount / 4)]++;
  }
  ASSERT_EQ(quarters.size(), 4u);
  for (const auto& [quarter, count] : quarters) {
    EXPECT_GT(count, 1700) << quarter;
    EXPECT_LT(count, 2300) << quarter;
  }
}

TEST(SlotMapTest, EvenSplitsTheSlotsInOrder) {
  SlotMap map = Three();
  EXPECT_EQ(map.epoch(), 1u);
  EXPECT_EQ(map.OwnerOf(0), "s0");
  EXPECT_EQ(map.OwnerOf(kSlotCount / 2), "s1");
  EXPECT_EQ(map.OwnerOf(kSlotCount - 1), "s2");
  EXPECT_EQ(map.AddressOf("s1"), "s1:7000");
  EXPECT_EQ(map.AddressOf("s9"), "");
  EXPECT_EQ(map.WritableSlotsOf("s0") + map.WritableSlotsOf("s1") + map.WritableSlotsOf("s2"),
            kSlotCount);
}

TEST(SlotMapTest, RefusesAMapThatLeavesASlotWithoutOneOwner) {
  v1::SlotMap proto = Three().proto();
  v1::SlotMap gap = proto;
  gap.mutable_ranges(0)->set_last(gap.ranges(0).last() - 1);
  EXPECT_NE(SlotMap::FromProto(gap).status().message().find("has no owner"), std::string::npos);

  v1::SlotMap overlap = proto;
  overlap.mutable_ranges(1)->set_first(overlap.ranges(1).first() - 1);
  EXPECT_NE(SlotMap::FromProto(overlap).status().message().find("in two ranges"),
            std::string::npos);

  v1::SlotMap unknown = proto;
  unknown.mutable_ranges(2)->set_shard("s9");
  EXPECT_EQ(SlotMap::FromProto(unknown).status().code(), absl::StatusCode::kInvalidArgument);

  v1::SlotMap twice = proto;
  *twice.add_shards() = Shard("s0");
  EXPECT_NE(SlotMap::FromProto(twice).status().message().find("twice"), std::string::npos);

  v1::SlotMap bad_id = proto;
  bad_id.mutable_shards(0)->set_id("S_0");
  EXPECT_EQ(SlotMap::FromProto(bad_id).status().code(), absl::StatusCode::kInvalidArgument);

  v1::SlotMap no_epoch = proto;
  no_epoch.set_epoch(0);
  EXPECT_EQ(SlotMap::FromProto(no_epoch).status().code(), absl::StatusCode::kInvalidArgument);

  v1::SlotMap wrong_from = proto;
  v1::SlotMigration* move = wrong_from.add_migrations();
  move->set_first(0);
  move->set_last(3);
  move->set_from_shard("s1");  // slots 0-3 belong to s0
  move->set_to_shard("s2");
  EXPECT_NE(SlotMap::FromProto(wrong_from).status().message().find("belongs to s0"),
            std::string::npos);
  EXPECT_TRUE(SlotMap::FromProto(proto).ok());
}

TEST(SlotMapTest, AMoveFreezesThenFlipsOrRollsBack) {
  SlotMap map = Three();
  absl::StatusOr<SlotMap> frozen = BeginMove(map, 10, 19, "s3", "s3:7000");
  ASSERT_TRUE(frozen.ok()) << frozen.status();
  EXPECT_EQ(frozen->epoch(), 2u);
  EXPECT_EQ(frozen->OwnerOf(10), "s0");
  EXPECT_TRUE(frozen->Migrating(10));
  EXPECT_TRUE(frozen->Migrating(19));
  EXPECT_FALSE(frozen->Migrating(9));
  EXPECT_FALSE(frozen->Migrating(20));
  EXPECT_EQ(frozen->MovingTo(10), "s3");
  EXPECT_EQ(frozen->MovingTo(20), "");
  EXPECT_EQ(frozen->AddressOf("s3"), "s3:7000");
  // No slot moves twice, and a run spans one owner.
  EXPECT_FALSE(BeginMove(*frozen, 15, 25, "s1").ok());
  EXPECT_FALSE(BeginMove(map, 300, 400, "s2").ok());  // s0 and s1 both own part of it

  absl::StatusOr<SlotMap> flipped = FinishMove(*frozen, 10, 19);
  ASSERT_TRUE(flipped.ok()) << flipped.status();
  EXPECT_EQ(flipped->epoch(), 3u);
  EXPECT_EQ(flipped->OwnerOf(10), "s3");
  EXPECT_EQ(flipped->OwnerOf(19), "s3");
  EXPECT_EQ(flipped->OwnerOf(9), "s0");
  EXPECT_EQ(flipped->OwnerOf(20), "s0");
  EXPECT_FALSE(flipped->Migrating(10));
  EXPECT_EQ(flipped->WritableSlotsOf("s3"), 10u);
  // Flipped, the entry stays to name the old owner that still holds a copy; the slots
  // cannot start another move, nor roll back, until it is released.
  EXPECT_EQ(flipped->proto().migrations(0).from_shard(), "s0");
  EXPECT_TRUE(flipped->proto().migrations(0).flipped());
  EXPECT_FALSE(FinishMove(*flipped, 10, 19).ok());
  EXPECT_FALSE(AbortMove(*flipped, 10, 19).ok());
  EXPECT_FALSE(BeginMove(*flipped, 10, 12, "s1").ok());
  absl::StatusOr<SlotMap> released = ReleaseMove(*flipped, 10, 19);
  ASSERT_TRUE(released.ok()) << released.status();
  EXPECT_EQ(released->epoch(), 4u);
  EXPECT_TRUE(released->proto().migrations().empty());
  EXPECT_EQ(released->OwnerOf(15), "s3");
  EXPECT_FALSE(ReleaseMove(*frozen, 10, 19).ok());  // not flipped yet
  EXPECT_EQ(ReleaseMove(*released, 10, 19).status().code(), absl::StatusCode::kNotFound);

  absl::StatusOr<SlotMap> rolled_back = AbortMove(*frozen, 10, 19);
  ASSERT_TRUE(rolled_back.ok());
  EXPECT_EQ(rolled_back->epoch(), 3u);
  EXPECT_EQ(rolled_back->OwnerOf(10), "s0");
  EXPECT_FALSE(rolled_back->Migrating(10));
}

TEST(SlotMapTest, JsonRoundTrips) {
  absl::StatusOr<SlotMap> frozen = BeginMove(Three(), 0, 5, "s2");
  ASSERT_TRUE(frozen.ok());
  absl::StatusOr<SlotMap> back = SlotMap::FromJson(frozen->ToJson());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->proto().SerializeAsString(), frozen->proto().SerializeAsString());
  EXPECT_EQ(SlotMap::FromJson("{\"epoch\": 1, \"nonsense\": 2}").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SlotMapFileTest, AWriteReplacesTheFileWhole) {
  const std::string path = testing::FreshDir("slot_map_file") + "/slots.json";
  EXPECT_EQ(ReadSlotMapFile(path).status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(WriteSlotMapFile(path, Three()).ok());
  absl::StatusOr<SlotMap> next = BeginMove(Three(), 0, 9, "s1");
  ASSERT_TRUE(next.ok());
  ASSERT_TRUE(WriteSlotMapFile(path, *next).ok());
  absl::StatusOr<SlotMap> read = ReadSlotMapFile(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->epoch(), 2u);
  EXPECT_TRUE(read->Migrating(0));

  std::ofstream(path) << "{ not json";
  EXPECT_EQ(ReadSlotMapFile(path).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace eonce
