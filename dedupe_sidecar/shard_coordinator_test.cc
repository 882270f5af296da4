// The coordination thread's turns on the in-memory store and the injected clock: a gate
// serves only under a lease it holds, with the store's map adopted and acknowledged; of
// two processes for one shard, at most one serves at any time.
#include "dedupe_sidecar/shard_coordinator.h"

#include <filesystem>

#include "common/coord/memory_map_store.h"
#include "common/status.h"
#include "gtest/gtest.h"
#include "tests/util/temp_dir.h"

namespace eonce {
namespace {

v1::ShardInfo Shard(const std::string& id) {
  v1::ShardInfo shard;
  shard.set_id(id);
  shard.set_address(id + ":1");
  return shard;
}

constexpr uint32_t kMine = 7;  // s0 owns 0..511

// One sidecar process of shard s0: its gate, its lease and its coordination thread's turns.
struct Process {
  Process(MemoryMapStore& store, ManualClock& clock, const std::string& dir) {
    std::filesystem::create_directories(dir);
    gate = *ShardGate::Open("s0", dir + "/kept.json", clock);
    lease = store.NewLease(MemoryLeaseOptions{10'000, 1'000});
    ShardCoordinatorOptions o;
    o.shard = "s0";
    o.address = dir;
    o.lease_ttl_ms = 10'000;
    coordinator = std::make_unique<ShardCoordinator>(*gate, store, *lease, clock, o);
  }
  bool Serves() { return gate->Check(kMine).ok(); }

  std::unique_ptr<ShardGate> gate;
  std::unique_ptr<ShardLease> lease;
  std::unique_ptr<ShardCoordinator> coordinator;
};

class ShardCoordinatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::FreshDir("shard_coordinator");
    seeded_ = *store_.CompareAndSwap(0, *SlotMap::Even({Shard("s0"), Shard("s1")}));
  }

  ManualClock clock_;
  MemoryMapStore store_{clock_};
  std::string dir_;
  SlotMap seeded_ = *SlotMap::Even({Shard("x")});
};

TEST_F(ShardCoordinatorTest, ServesOnlyOnceTheMapIsAdoptedAndAcknowledged) {
  Process p(store_, clock_, dir_ + "/a");
  EXPECT_FALSE(p.Serves());
  store_.SetDown(true);
  EXPECT_FALSE(p.coordinator->Step(0).ok());
  EXPECT_FALSE(p.Serves());
  store_.SetDown(false);
  ASSERT_TRUE(p.coordinator->Step(0).ok()) << p.coordinator->Step(0);
  EXPECT_TRUE(p.Serves());
  EXPECT_EQ(p.gate->epoch(), seeded_.epoch());
  EXPECT_EQ(store_.Presence("s0")->held_epoch, seeded_.epoch());

  // A newer map in the store is adopted and acknowledged on the next turn.
  SlotMap frozen = *store_.CompareAndSwap(seeded_.epoch(), *BeginMove(seeded_, 0, 9, "s1"));
  ASSERT_TRUE(p.coordinator->Step(0).ok()) << p.coordinator->Step(0);
  EXPECT_EQ(p.gate->epoch(), frozen.epoch());
  EXPECT_EQ(store_.Presence("s0")->held_epoch, frozen.epoch());
  EXPECT_EQ(ReasonOf(p.gate->Check(kMine)), "SLOT_MIGRATING");

  // A map a mover pushed first is acknowledged too.
  SlotMap flipped = *store_.CompareAndSwap(frozen.epoch(), *FinishMove(frozen, 0, 9));
  ASSERT_TRUE(p.gate->Adopt(flipped, 1000).ok());
  ASSERT_TRUE(p.coordinator->Step(0).ok()) << p.coordinator->Step(0);
  EXPECT_EQ(store_.Presence("s0")->held_epoch, flipped.epoch());
}

TEST_F(ShardCoordinatorTest, OfTwoProcessesForOneShardAtMostOneServesAtAnyTime) {
  Process first(store_, clock_, dir_ + "/a");
  Process second(store_, clock_, dir_ + "/b");
  ASSERT_TRUE(first.coordinator->Step(0).ok());
  EXPECT_EQ(ReasonOf(second.coordinator->Step(0)), "SHARD_HELD");
  EXPECT_TRUE(first.Serves());
  EXPECT_FALSE(second.Serves());

  // The first is cut off from the store: its renewals fail, and it stops serving before
  // its lease lapses, on the clock alone.
  store_.SetPartitioned("s0", true);
  bool overlap = false;
  bool second_served = false;
  for (int tick = 0; tick < 40; ++tick) {
    clock_.AdvanceMs(500);
    first.coordinator->Step(0).IgnoreError();
    if (tick == 20) store_.SetPartitioned("s0", false);  // the second reaches the store
    if (tick > 20) {
      second.coordinator->Step(0).IgnoreError();
    }
    overlap |= first.Serves() && second.Serves();
    second_served |= second.Serves();
  }
  EXPECT_FALSE(overlap);
  EXPECT_TRUE(second_served);
  EXPECT_FALSE(first.Serves());
  // The first learns it lost the lease, and waits its turn.
  EXPECT_EQ(ReasonOf(first.coordinator->Step(0)), "SHARD_HELD");
  EXPECT_FALSE(first.Serves());
}

TEST_F(ShardCoordinatorTest, StoppingGivesTheShardBackAtOnce) {
  Process first(store_, clock_, dir_ + "/a");
  Process second(store_, clock_, dir_ + "/b");
  ASSERT_TRUE(first.coordinator->Step(0).ok());
  first.coordinator->Stop();
  EXPECT_FALSE(first.Serves());
  ASSERT_TRUE(second.coordinator->Step(0).ok());
  EXPECT_TRUE(second.Serves());
}

}  // namespace
}  // namespace eonce
