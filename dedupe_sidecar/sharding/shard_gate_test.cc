// The slot gate: what a sharded sidecar lets in, the refusals it gives, and how it adopts
// a newer map (kept on disk, never an older one, waiting for the moved slots' work); only
// while the shard's lease lasts.
#include "dedupe_sidecar/sharding/shard_gate.h"

#include <thread>

#include "absl/synchronization/notification.h"
#include "common/base/status.h"
#include "gtest/gtest.h"
#include "tests/util/temp_dir.h"

namespace eonce {
namespace {

v1::ShardInfo Shard(const std::string& id) {
  v1::ShardInfo shard;
  shard.set_id(id);
  shard.set_address(id + ".local:7100");
  return shard;
}

class ShardGateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::FreshDir("shard_gate");
    absl::StatusOr<SlotMap> map = SlotMap::Even({Shard("s0"), Shard("s1")});
    ASSERT_TRUE(map.ok());
    map_ = *map;
    Open();
    ASSERT_TRUE(gate_->Adopt(map_, 1000).ok());
  }

  void Open() {
    gate_.reset();
    absl::StatusOr<std::unique_ptr<ShardGate>> gate = ShardGate::Open("s0", kept(), clock_);
    ASSERT_TRUE(gate.ok()) << gate.status();
    gate_ = std::move(*gate);
    gate_->SetServeUntilMs(clock_.NowMs() + 10'000);
  }

  std::string kept() const { return dir_ + "/kept.json"; }

  // s0 owns 0..511, s1 owns 512..1023.
  static constexpr uint32_t kMine = 7;
  static constexpr uint32_t kTheirs = 900;

  ManualClock clock_;
  std::string dir_;
  SlotMap map_ = *SlotMap::Even({Shard("x")});
  std::unique_ptr<ShardGate> gate_;
};

TEST_F(ShardGateTest, LetsInItsOwnSlotsAndNamesTheOwnerOfOthers) {
  EXPECT_TRUE(gate_->Enter(kMine).ok());
  absl::StatusOr<ShardGate::Pass> refused = gate_->Enter(kTheirs);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(ReasonOf(refused.status()), "SLOT_MOVED");
  auto facts = ErrorMetadataOf(refused.status());
  EXPECT_EQ(facts["owner"], "s1");
  EXPECT_EQ(facts["owner_address"], "s1.local:7100");
  EXPECT_EQ(facts["epoch"], "1");
  EXPECT_EQ(facts["slot"], "900");
  EXPECT_EQ(ReasonOf(gate_->Check(kTheirs)), "SLOT_MOVED");
  EXPECT_TRUE(gate_->Check(kMine).ok());
}

TEST_F(ShardGateTest, PassesAreCountedUntilReleased) {
  {
    absl::StatusOr<ShardGate::Pass> a = gate_->Enter(kMine);
    absl::StatusOr<ShardGate::Pass> b = gate_->Enter(kMine);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(gate_->in_flight(), 2);
    ShardGate::Pass moved = std::move(*a);
    EXPECT_EQ(gate_->in_flight(), 2);
    moved.Release();
    EXPECT_EQ(gate_->in_flight(), 1);
  }
  EXPECT_EQ(gate_->in_flight(), 0);
}

TEST_F(ShardGateTest, AMovingSlotIsRefusedAsRetryable) {
  absl::StatusOr<SlotMap> frozen = BeginMove(map_, 0, 9, "s1");
  ASSERT_TRUE(frozen.ok());
  ASSERT_TRUE(gate_->Adopt(*frozen, 1000).ok());
  absl::StatusOr<ShardGate::Pass> refused = gate_->Enter(kMine);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(ReasonOf(refused.status()), "SLOT_MIGRATING");
  EXPECT_TRUE(RetryAfterOf(refused.status()).has_value());
  EXPECT_TRUE(gate_->Enter(10).ok());  // the next slot is not moving
}

TEST_F(ShardGateTest, ASlotMovingHereIsRefusedAsRetryableUntilTheFlip) {
  absl::StatusOr<SlotMap> incoming = BeginMove(map_, kTheirs, kTheirs, "s0");
  ASSERT_TRUE(incoming.ok());
  ASSERT_TRUE(gate_->Adopt(*incoming, 1000).ok());
  EXPECT_EQ(ReasonOf(gate_->Enter(kTheirs).status()), "SLOT_MIGRATING");
  absl::StatusOr<SlotMap> flipped = FinishMove(*incoming, kTheirs, kTheirs);
  ASSERT_TRUE(flipped.ok());
  ASSERT_TRUE(gate_->Adopt(*flipped, 1000).ok());
  EXPECT_TRUE(gate_->Enter(kTheirs).ok());
}

TEST_F(ShardGateTest, EachStepOfAMoveRunsOnlyWhereTheMapSaysItMay) {
  // Nothing moves yet: no export, no import, and no drop of slots still owned here.
  EXPECT_EQ(ReasonOf(gate_->CheckExport(0, 9).status()), "SLOTS_NOT_MOVING_FROM_HERE");
  EXPECT_EQ(ReasonOf(gate_->HoldImport(kTheirs, kTheirs, 0).status()), "SLOTS_NOT_MOVING_HERE");
  EXPECT_EQ(ReasonOf(gate_->HoldDrop(0, 9, 0).status()), "SLOTS_STILL_HERE");
  EXPECT_TRUE(gate_->HoldDrop(kTheirs, kTheirs, 0).ok());
  EXPECT_EQ(gate_->CheckExport(9, 0).status().code(), absl::StatusCode::kInvalidArgument);

  absl::StatusOr<ShardGate::Pass> running = gate_->Enter(kMine);
  ASSERT_TRUE(running.ok());
  absl::StatusOr<SlotMap> frozen = BeginMove(map_, 0, 9, "s1");
  ASSERT_TRUE(frozen.ok());
  EXPECT_FALSE(gate_->Adopt(*frozen, 10).ok());  // slot 7 still runs
  // Exporting while a command still runs could miss its write.
  EXPECT_EQ(ReasonOf(gate_->CheckExport(0, 9).status()), "DRAINING_SLOTS");
  running->Release();
  EXPECT_TRUE(gate_->CheckExport(0, 9).ok());
  EXPECT_EQ(ReasonOf(gate_->CheckExport(0, 10).status()), "SLOTS_NOT_MOVING_FROM_HERE");
  EXPECT_EQ(ReasonOf(gate_->HoldDrop(0, 9, 0).status()), "SLOTS_STILL_HERE");

  absl::StatusOr<SlotMap> incoming = BeginMove(*frozen, kTheirs, kTheirs, "s0");
  ASSERT_TRUE(incoming.ok());
  ASSERT_TRUE(gate_->Adopt(*incoming, 1000).ok());
  EXPECT_TRUE(gate_->HoldImport(kTheirs, kTheirs, incoming->epoch()).ok());
  // A step of another epoch's move (a run that lost the map) lands nowhere.
  EXPECT_EQ(ReasonOf(gate_->HoldImport(kTheirs, kTheirs, frozen->epoch()).status()),
            "STALE_STEP");
  // A run moving here, not flipped, may be cleared of an earlier copy's leftovers.
  EXPECT_TRUE(gate_->HoldDrop(kTheirs, kTheirs, incoming->epoch()).ok());
  absl::StatusOr<SlotMap> flipped = FinishMove(*incoming, kTheirs, kTheirs);
  ASSERT_TRUE(flipped.ok());
  ASSERT_TRUE(gate_->Adopt(*flipped, 1000).ok());
  EXPECT_EQ(ReasonOf(gate_->HoldDrop(kTheirs, kTheirs, 0).status()), "SLOTS_STILL_HERE");
}

// Finding 2: an import that comes after this shard took the run would write over what it
// wrote since. The import's check and its writes hold off the adoption of the flip.
TEST_F(ShardGateTest, NoImportOnceTheFlipIsAdopted) {
  absl::StatusOr<SlotMap> incoming = BeginMove(map_, kTheirs, kTheirs, "s0");
  ASSERT_TRUE(incoming.ok());
  ASSERT_TRUE(gate_->Adopt(*incoming, 1000).ok());
  absl::StatusOr<SlotMap> flipped = FinishMove(*incoming, kTheirs, kTheirs);
  ASSERT_TRUE(flipped.ok());
  absl::Notification adopted;
  std::thread flip;
  {
    absl::StatusOr<ShardGate::TransferHold> writing = gate_->HoldImport(kTheirs, kTheirs, 0);
    ASSERT_TRUE(writing.ok()) << writing.status();
    flip = std::thread([&] {
      EXPECT_TRUE(gate_->Adopt(*flipped, 1000).ok());
      adopted.Notify();
    });
    EXPECT_FALSE(adopted.WaitForNotificationWithTimeout(absl::Milliseconds(50)));
  }
  flip.join();
  EXPECT_EQ(ReasonOf(gate_->HoldImport(kTheirs, kTheirs, 0).status()), "SLOTS_NOT_MOVING_HERE");
  EXPECT_TRUE(gate_->Enter(kTheirs).ok());
}

TEST_F(ShardGateTest, NothingIsLetInOutsideTheLease) {
  EXPECT_TRUE(gate_->Enter(kMine).ok());
  clock_.AdvanceMs(10'000);  // the serving window ends; the lease may be another's now
  absl::StatusOr<ShardGate::Pass> refused = gate_->Enter(kMine);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(ReasonOf(refused.status()), "NOT_LEASED");
  EXPECT_EQ(ReasonOf(gate_->Check(kMine)), "NOT_LEASED");
  gate_->SetServeUntilMs(clock_.NowMs() + 1);
  EXPECT_TRUE(gate_->Enter(kMine).ok());
}

TEST_F(ShardGateTest, NeverGoesBackToAnOlderMap) {
  absl::StatusOr<SlotMap> frozen = BeginMove(map_, 0, 9, "s1");
  ASSERT_TRUE(frozen.ok());
  ASSERT_TRUE(gate_->Adopt(*frozen, 1000).ok());
  // Adopting the same map again is a no-op; an older one, or another at the same epoch,
  // is refused.
  EXPECT_TRUE(gate_->Adopt(*frozen, 1000).ok());
  EXPECT_EQ(ReasonOf(gate_->Adopt(map_, 1000).status()), "STALE_EPOCH");
  absl::StatusOr<SlotMap> other = BeginMove(map_, 20, 29, "s1");
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(ReasonOf(gate_->Adopt(*other, 1000).status()), "EPOCH_CONFLICT");

  // A restart starts from the adopted epoch 2 (kept in the data directory): slot 7 stays
  // refused, and the older map is refused still.
  Open();
  EXPECT_EQ(gate_->map()->epoch(), 2u);
  EXPECT_EQ(ReasonOf(gate_->Enter(kMine).status()), "SLOT_MIGRATING");
  EXPECT_EQ(ReasonOf(gate_->Adopt(map_, 1000).status()), "STALE_EPOCH");
}

TEST_F(ShardGateTest, AdoptionWaitsForTheWorkOnSlotsItTakesAway) {
  absl::StatusOr<ShardGate::Pass> running = gate_->Enter(kMine);
  absl::StatusOr<ShardGate::Pass> staying = gate_->Enter(300);
  ASSERT_TRUE(running.ok() && staying.ok());
  absl::StatusOr<SlotMap> frozen = BeginMove(map_, 0, 9, "s1");
  ASSERT_TRUE(frozen.ok());
  // The command on slot 7 still runs: the adoption reports it cannot vouch yet, though
  // the map is held (slot 7 takes nothing new).
  absl::StatusOr<uint64_t> early = gate_->Adopt(*frozen, 50);
  EXPECT_EQ(early.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(gate_->map()->epoch(), 2u);
  EXPECT_EQ(ReasonOf(gate_->Enter(kMine).status()), "SLOT_MIGRATING");

  absl::Notification adopted;
  std::thread asker([&] {
    EXPECT_TRUE(gate_->Adopt(*frozen, 10'000).ok());
    adopted.Notify();
  });
  // Slot 300 is not moving: its pass does not hold the adoption up, slot 7's does.
  EXPECT_FALSE(adopted.WaitForNotificationWithTimeout(absl::Milliseconds(100)));
  running->Release();
  asker.join();
  EXPECT_TRUE(adopted.HasBeenNotified());
  EXPECT_EQ(gate_->in_flight(), 1);
}

TEST_F(ShardGateTest, WithoutAMapNothingIsLetIn) {
  absl::StatusOr<std::unique_ptr<ShardGate>> fresh =
      ShardGate::Open("s0", dir_ + "/none.json", clock_);
  ASSERT_TRUE(fresh.ok());
  (*fresh)->SetServeUntilMs(clock_.NowMs() + 10'000);
  EXPECT_EQ((*fresh)->map(), nullptr);
  EXPECT_EQ(ReasonOf((*fresh)->Enter(kMine).status()), "NOT_LEASED");
  EXPECT_EQ(ReasonOf((*fresh)->CheckExport(0, 9).status()), "NO_SLOT_MAP");
  ASSERT_TRUE((*fresh)->Adopt(map_, 1000).ok());
  EXPECT_TRUE((*fresh)->Enter(kMine).ok());
}

}  // namespace
}  // namespace eonce
