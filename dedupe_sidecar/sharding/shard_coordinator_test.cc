// The coordination thread's turns on the in-memory store and the injected clock: a gate
// serves only under a lease it holds, with the store's map adopted and acknowledged; of
// two processes for one shard, at most one serves at any time.
#include "dedupe_sidecar/sharding/shard_coordinator.h"

#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

#include "common/coord/memory_map_store.h"
#include "common/base/status.h"
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

// The business of a shard: the holds it was told (first-last@epoch), refused while down.
class HoldingBusiness : public Upstream {
 public:
  void Forward(ForwardCall, std::function<void(ForwardReply)>) override {}
  void QueryOutcome(const std::string&, const std::string&, int64_t,
                    std::function<void(absl::StatusOr<v1::QueryOutcomeResponse>)>) override {}
  bool Reachable() override { return !down; }
  absl::StatusOr<v1::HoldSlotDataResponse> HoldSlotData(const v1::HoldSlotDataRequest& request,
                                                        int64_t /*deadline_ms*/) override {
    if (down) return absl::UnavailableError("business down");
    holds.push_back(absl::StrCat(request.first_slot(), "-", request.last_slot(), "@",
                                 request.epoch()));
    return v1::HoldSlotDataResponse();
  }
  bool down = false;
  std::vector<std::string> holds;
};

// One sidecar process of shard s0: its gate, its lease and its coordination thread's turns.
struct Process {
  Process(MemoryMapStore& store, ManualClock& clock, const std::string& dir,
          BusinessSlots* business = nullptr) {
    std::filesystem::create_directories(dir);
    gate = *ShardGate::Open("s0", dir + "/kept.json", clock);
    lease = store.NewLease(MemoryLeaseOptions{10'000, 1'000});
    ShardCoordinatorOptions o;
    o.shard = "s0";
    o.address = dir;
    o.lease_ttl_ms = 10'000;
    coordinator = std::make_unique<ShardCoordinator>(*gate, store, *lease, clock, o, business);
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

// The business learns which slots this shard holds from every map acknowledged: an aborted
// move's run is its own again (it counts it, relays its follow-ups) without waiting for a
// write to it.
TEST_F(ShardCoordinatorTest, TheBusinessIsToldTheSlotsHeldAfterEachMapIsAcknowledged) {
  HoldingBusiness upstream;
  BusinessSlots business{upstream, clock_};
  Process p(store_, clock_, dir_ + "/a", &business);
  ASSERT_TRUE(p.coordinator->Step(0).ok());
  const std::string seeded = absl::StrCat(seeded_.epoch());
  EXPECT_EQ(upstream.holds, std::vector<std::string>({"0-511@" + seeded}));
  EXPECT_EQ(p.coordinator->business_held(), seeded_.epoch());
  // A turn with no newer map tells it nothing again.
  ASSERT_TRUE(p.coordinator->Step(0).ok());
  EXPECT_EQ(upstream.holds.size(), 1u);

  // Frozen: the moving run is not held; the rest is.
  SlotMap frozen = *store_.CompareAndSwap(seeded_.epoch(), *BeginMove(seeded_, 0, 9, "s1"));
  ASSERT_TRUE(p.coordinator->Step(0).ok());
  EXPECT_EQ(upstream.holds.back(), absl::StrCat("10-511@", frozen.epoch()));

  // Aborted while the business is down: the map is followed and acknowledged anyway, and
  // the hold comes on a later turn, at the abort's epoch.
  upstream.down = true;
  SlotMap aborted = *store_.CompareAndSwap(frozen.epoch(), *AbortMove(frozen, 0, 9));
  ASSERT_TRUE(p.coordinator->Step(0).ok());
  EXPECT_EQ(store_.Presence("s0")->held_epoch, aborted.epoch());
  EXPECT_EQ(p.coordinator->business_held(), frozen.epoch());
  EXPECT_EQ(upstream.holds.size(), 2u);
  upstream.down = false;
  ASSERT_TRUE(p.coordinator->Step(0).ok());
  EXPECT_EQ(upstream.holds.back(), absl::StrCat("0-511@", aborted.epoch()));
  EXPECT_EQ(p.coordinator->business_held(), aborted.epoch());
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
