// The in-memory coordination store keeps etcd's rules: one revision per write, a
// compare-and-swap on the predecessor's revision, leases that lapse on the clock.
#include "common/coord/memory_map_store.h"

#include "common/coord/blind_map_store.h"
#include "common/base/status.h"
#include "gtest/gtest.h"

namespace eonce {
namespace {

SlotMap TwoShards() {
  v1::ShardInfo a, b;
  a.set_id("a");
  a.set_address("a:1");
  b.set_id("b");
  b.set_address("b:1");
  absl::StatusOr<SlotMap> map = SlotMap::Even({a, b});
  EXPECT_TRUE(map.ok()) << map.status();
  return *map;
}

TEST(MemoryMapStoreTest, EveryChangeComparesThePredecessorsEpoch) {
  ManualClock clock;
  MemoryMapStore store(clock);
  EXPECT_EQ(store.Read().status().code(), absl::StatusCode::kNotFound);
  absl::StatusOr<SlotMap> seeded = store.CompareAndSwap(0, TwoShards());
  ASSERT_TRUE(seeded.ok()) << seeded.status();
  // A second seed finds a map there.
  absl::StatusOr<SlotMap> again = store.CompareAndSwap(0, TwoShards());
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(ReasonOf(again.status()), "EPOCH_CHANGED");

  absl::StatusOr<SlotMap> frozen = BeginMove(*seeded, 0, 9, "b");
  ASSERT_TRUE(frozen.ok());
  absl::StatusOr<SlotMap> first = store.CompareAndSwap(seeded->epoch(), *frozen);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_GT(first->epoch(), seeded->epoch());
  // A second writer from the same epoch loses, and nothing is written.
  EXPECT_EQ(store.CompareAndSwap(seeded->epoch(), *frozen).status().code(),
            absl::StatusCode::kAborted);
  EXPECT_EQ(store.map_writes(), 2);
  EXPECT_EQ(store.Read()->epoch(), first->epoch());
}

TEST(MemoryMapStoreTest, TheBlindStoreWritesOverAnyEpoch) {
  ManualClock clock;
  MemoryMapStore memory(clock);
  BlindMapStore blind(memory);
  absl::StatusOr<SlotMap> seeded = blind.CompareAndSwap(0, TwoShards());
  ASSERT_TRUE(seeded.ok());
  EXPECT_TRUE(blind.CompareAndSwap(seeded->epoch(), TwoShards()).ok());
  EXPECT_TRUE(blind.CompareAndSwap(seeded->epoch(), TwoShards()).ok());
  EXPECT_EQ(memory.map_writes(), 3);
}

TEST(MemoryMapStoreTest, WaitNewerReturnsWhatTheCallerMissed) {
  ManualClock clock;
  MemoryMapStore store(clock);
  EXPECT_EQ(store.WaitNewer(0, 0).status().code(), absl::StatusCode::kDeadlineExceeded);
  absl::StatusOr<SlotMap> seeded = store.CompareAndSwap(0, TwoShards());
  ASSERT_TRUE(seeded.ok());
  absl::StatusOr<SlotMap> newer = store.WaitNewer(0, 0);
  ASSERT_TRUE(newer.ok());
  EXPECT_EQ(newer->epoch(), seeded->epoch());
  EXPECT_EQ(store.WaitNewer(seeded->epoch(), 0).status().code(),
            absl::StatusCode::kDeadlineExceeded);
}

TEST(MemoryMapStoreTest, OneProcessPerShardUntilItsLeaseLapses) {
  ManualClock clock;
  MemoryMapStore store(clock);
  MemoryLeaseOptions options{/*ttl_ms=*/10'000, /*margin_ms=*/1'000};
  std::unique_ptr<ShardLease> first = store.NewLease(options);
  std::unique_ptr<ShardLease> second = store.NewLease(options);
  const int64_t start = clock.NowMs();
  ASSERT_TRUE(first->Acquire("a", "a:1").ok());
  EXPECT_EQ(first->ServeUntilMs(), start + 10'000 - 100 - 1'000);
  absl::Status held = second->Acquire("a", "a:2");
  EXPECT_EQ(ReasonOf(held), "SHARD_HELD");
  ASSERT_TRUE(first->Acknowledge(7).ok());
  EXPECT_EQ(store.Presence("a")->held_epoch, 7u);
  EXPECT_TRUE(store.Presence("a")->live);

  // Cut off: renewals fail, serving ends before the store lets the lease go.
  store.SetPartitioned("a", true);
  clock.AdvanceMs(3'000);
  EXPECT_EQ(first->Renew().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(first->ServeUntilMs(), start + 8'900);
  clock.AdvanceMs(5'900);  // past ServeUntil, before the lease's end
  EXPECT_LE(first->ServeUntilMs(), clock.NowMs());
  EXPECT_TRUE(store.Presence("a")->live);
  store.SetPartitioned("a", false);  // the cut is the shard's: let a second process in
  EXPECT_EQ(ReasonOf(second->Acquire("a", "a:2")), "SHARD_HELD");
  clock.AdvanceMs(1'100);  // the lease lapsed
  EXPECT_FALSE(store.Presence("a")->live);
  ASSERT_TRUE(second->Acquire("a", "a:2").ok());
  EXPECT_EQ(store.Presence("a")->address, "a:2");
  EXPECT_EQ(store.Presence("a")->held_epoch, 0u);
  EXPECT_EQ(ReasonOf(first->Renew()), "LEASE_LOST");
  second->Release();
  EXPECT_FALSE(store.Presence("a")->live);
}

}  // namespace
}  // namespace eonce
