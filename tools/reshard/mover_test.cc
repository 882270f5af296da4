// The mover on the in-memory coordination store, against shards that keep a gate's rules
// (adopt only newer maps, never another map at the held epoch; import only while the held
// map moves the run here, unflipped, at the step's epoch; drop only what is not owned) and
// whose data are rows by slot. Interleavings are forced by hooks, not by timing.
#include "tools/reshard/mover.h"

#include <functional>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/coord/blind_map_store.h"
#include "common/coord/memory_map_store.h"
#include "common/coord/seed.h"
#include "common/base/status.h"
#include "gtest/gtest.h"

namespace eonce {
namespace {

constexpr uint32_t kFirst = 0;
constexpr uint32_t kLast = 9;

struct FakeShard {
  std::string id;
  bool up = true;
  std::unique_ptr<SlotMap> held;
  std::map<std::string, std::string> rows;  // "slot/key" -> value
  int epoch_conflicts = 0;
  std::function<void()> before_import;  // once, before the import numbered hook_at_import
  int hook_at_import = 1;
  int imports = 0;
  bool export_fails = false;
  std::unique_ptr<ShardLease> lease;

  bool Owns(uint32_t slot) const {
    return held != nullptr && held->OwnerOf(slot) == id && !held->Migrating(slot);
  }
  absl::Status Reachable() const {
    return up ? absl::OkStatus() : absl::UnavailableError(absl::StrCat(id, " is down"));
  }
  absl::StatusOr<uint64_t> Adopt(const SlotMap& map) {
    if (held != nullptr && map.epoch() < held->epoch()) {
      return Error(absl::StatusCode::kFailedPrecondition, "STALE_EPOCH", "older");
    }
    if (held != nullptr && map.epoch() == held->epoch() &&
        map.proto().SerializeAsString() != held->proto().SerializeAsString()) {
      ++epoch_conflicts;
      return Error(absl::StatusCode::kFailedPrecondition, "EPOCH_CONFLICT", "other map");
    }
    held = std::make_unique<SlotMap>(map);
    if (lease != nullptr) lease->Acknowledge(map.epoch()).IgnoreError();
    return map.epoch();
  }
  absl::Status AtEpoch(uint64_t epoch) const {
    if (epoch != 0 && (held == nullptr || held->epoch() != epoch)) {
      return Error(absl::StatusCode::kFailedPrecondition, "STALE_STEP", "another epoch");
    }
    return absl::OkStatus();
  }
};

uint32_t SlotOfRow(const std::string& key) {
  return static_cast<uint32_t>(std::stoul(key.substr(0, key.find('/'))));
}

class FakeAdmin : public ShardAdmin {
 public:
  explicit FakeAdmin(FakeShard& shard) : s_(shard) {}
  absl::StatusOr<uint64_t> Adopt(const SlotMap& map, int64_t) override {
    EONCE_RETURN_IF_ERROR(s_.Reachable());
    return s_.Adopt(map);
  }
  absl::StatusOr<v1::ExportSlotsResponse> Export(const v1::ExportSlotsRequest& r) override {
    EONCE_RETURN_IF_ERROR(s_.Reachable());
    if (s_.export_fails) return absl::UnavailableError("export failed");
    v1::ExportSlotsResponse page;
    for (auto it = s_.rows.upper_bound(r.after()); it != s_.rows.end(); ++it) {
      const uint32_t slot = SlotOfRow(it->first);
      if (slot < r.first_slot() || slot > r.last_slot()) continue;
      if (page.records_size() == r.limit()) {
        page.set_next_after(page.records(page.records_size() - 1).substr(
            0, page.records(page.records_size() - 1).find('=')));
        break;
      }
      page.add_records(absl::StrCat(it->first, "=", it->second));
    }
    return page;
  }
  absl::StatusOr<int64_t> Import(const v1::ImportSlotsRequest& r) override {
    if (s_.before_import && ++s_.imports == s_.hook_at_import) {
      auto hook = std::move(s_.before_import);
      s_.before_import = nullptr;
      hook();
    }
    EONCE_RETURN_IF_ERROR(s_.Reachable());
    EONCE_RETURN_IF_ERROR(s_.AtEpoch(r.epoch()));
    for (uint32_t slot = r.first_slot(); slot <= r.last_slot(); ++slot) {
      if (s_.held->MovingTo(slot) != s_.id) {
        return Error(absl::StatusCode::kFailedPrecondition, "SLOTS_NOT_MOVING_HERE", "no");
      }
    }
    for (const std::string& record : r.records()) {
      std::vector<std::string> kv = absl::StrSplit(record, absl::MaxSplits('=', 1));
      s_.rows[kv[0]] = kv[1];
    }
    return r.records_size();
  }
  absl::StatusOr<int64_t> Drop(uint32_t first, uint32_t last, uint64_t epoch) override {
    EONCE_RETURN_IF_ERROR(s_.Reachable());
    EONCE_RETURN_IF_ERROR(s_.AtEpoch(epoch));
    int64_t dropped = 0;
    for (uint32_t slot = first; slot <= last; ++slot) {
      if (s_.held->OwnerOf(slot) == s_.id) {
        return Error(absl::StatusCode::kFailedPrecondition, "SLOTS_STILL_HERE", "owned");
      }
    }
    for (auto it = s_.rows.begin(); it != s_.rows.end();) {
      const uint32_t slot = SlotOfRow(it->first);
      if (slot >= first && slot <= last) {
        it = s_.rows.erase(it);
        ++dropped;
      } else {
        ++it;
      }
    }
    return dropped;
  }
  absl::StatusOr<v1::SlotMap> Held() override { return s_.held->proto(); }

 private:
  FakeShard& s_;
};

class MoverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* id : {"f", "t"}) {
      shards_[id].id = id;
      v1::ShardInfo info;
      info.set_id(id);
      info.set_address(absl::StrCat(id, ":1"));
      infos_.push_back(info);
    }
    // f owns 0-511, t 512-1023.
    absl::StatusOr<SlotMap> seeded = SeedSlotMap(store_, *SlotMap::Even(infos_));
    ASSERT_TRUE(seeded.ok()) << seeded.status();
    for (auto& [id, shard] : shards_) shard.Adopt(*seeded).IgnoreError();
    for (uint32_t slot = kFirst; slot <= kLast + 2; ++slot) {
      shards_["f"].rows[absl::StrCat(slot, "/k")] = absl::StrCat("v", slot);
    }
    admins_ = [this](const std::string& address) -> std::unique_ptr<ShardAdmin> {
      return std::make_unique<FakeAdmin>(shards_[address.substr(0, address.find(':'))]);
    };
  }

  MoveOptions Options(bool abort = false) {
    MoveOptions o;
    o.first = kFirst;
    o.last = kLast;
    o.to = "t";
    o.abort = abort;
    o.ack_timeout_ms = 1'000;
    return o;
  }

  // Shards whose held map lets them take `slot`'s commands now.
  int OwnersOf(uint32_t slot) {
    int owners = 0;
    for (auto& [id, shard] : shards_) owners += shard.Owns(slot) ? 1 : 0;
    return owners;
  }

  // Every row of the run is on t with its last value, none on f.
  void ExpectMovedRows() {
    for (uint32_t slot = kFirst; slot <= kLast; ++slot) {
      const std::string key = absl::StrCat(slot, "/k");
      EXPECT_EQ(shards_["t"].rows[key], absl::StrCat("v", slot)) << key;
      EXPECT_EQ(shards_["f"].rows.count(key), 0u) << key;
    }
  }

  ManualClock clock_;
  MemoryMapStore store_{clock_};
  std::vector<v1::ShardInfo> infos_;
  std::map<std::string, FakeShard> shards_;
  ShardAdminFactory admins_;
};

TEST_F(MoverTest, MovesTheRunAndItsRowsWithOneCompareAndSwapPerStep) {
  absl::StatusOr<MoveReport> report = MoveSlots(Options(), store_, admins_, clock_);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->outcome, "moved");
  EXPECT_EQ(store_.map_writes(), 4);  // seed, freeze, flip, release
  ExpectMovedRows();
  EXPECT_EQ(shards_["f"].rows.count("10/k"), 1u);  // outside the run: stays
  SlotMap map = *store_.Read();
  for (uint32_t slot = kFirst; slot <= kLast; ++slot) EXPECT_EQ(map.OwnerOf(slot), "t");
  EXPECT_EQ(map.proto().migrations_size(), 0);
  // Again: nothing to do.
  report = MoveSlots(Options(), store_, admins_, clock_);
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->outcome, "already there");
}

// A store restored from an older snapshot holds an older map than the shards do: a step
// written there would take an epoch the shards passed, with contents they moved on from.
// The move refuses before it writes anything.
TEST_F(MoverTest, AStoreBehindTheShardsIsRefusedBeforeAnyWrite) {
  ASSERT_TRUE(MoveSlots(Options(), store_, admins_, clock_).ok());
  MemoryMapStore restored{clock_};
  ASSERT_TRUE(SeedSlotMap(restored, *SlotMap::Even(infos_)).ok());
  MoveOptions back = Options();
  back.to = "f";
  absl::StatusOr<MoveReport> report = MoveSlots(back, restored, admins_, clock_);
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.status().code(), absl::StatusCode::kFailedPrecondition) << report.status();
  EXPECT_EQ(ReasonOf(report.status()), "STORE_BEHIND_SHARDS") << report.status();
  EXPECT_EQ(restored.map_writes(), 1);  // the seed only
}

TEST_F(MoverTest, ResumesFromTheStoreAfterStoppingAtEachStep) {
  for (const char* step : {"freeze", "copy", "flip", "drop"}) {
    MoveOptions o = Options();
    o.stop_after = step;
    absl::StatusOr<MoveReport> report = MoveSlots(o, store_, admins_, clock_);
    ASSERT_TRUE(report.ok()) << step << ": " << report.status();
    EXPECT_EQ(report->outcome, absl::StrCat("stopped after ", step));
  }
  absl::StatusOr<MoveReport> report = MoveSlots(Options(), store_, admins_, clock_);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->outcome, "moved");
  ExpectMovedRows();
}

// Finding 1: an abort decided on a map read before the flip, landing after it while the
// new owner (which took the run) is down. The store refuses it; nobody else can.
class AbortRace : public MoverTest {
 protected:
  absl::StatusOr<MoveReport> AbortFromBeforeTheFlip(MapStore& store_for_abort) {
    MoveOptions to_copy = Options();
    to_copy.stop_after = "copy";
    EXPECT_TRUE(MoveSlots(to_copy, store_, admins_, clock_).ok());
    HookMapStore late(store_for_abort, [this] {
      MoveOptions flip = Options();
      flip.stop_after = "flip";
      absl::StatusOr<MoveReport> flipped = MoveSlots(flip, store_, admins_, clock_);
      EXPECT_TRUE(flipped.ok()) << flipped.status();
      shards_["t"].up = false;  // serving the run, then cut off from the mover
    });
    return MoveSlots(Options(/*abort=*/true), late, admins_, clock_);
  }
};

TEST_F(AbortRace, AnAbortAfterTheFlipIsRefusedAndTheRunKeepsOneOwner) {
  absl::StatusOr<MoveReport> aborted = AbortFromBeforeTheFlip(store_);
  EXPECT_EQ(ReasonOf(aborted.status()), "ALREADY_FLIPPED") << aborted.status();
  for (uint32_t slot = kFirst; slot <= kLast; ++slot) EXPECT_LE(OwnersOf(slot), 1) << slot;
  EXPECT_EQ(store_.Read()->OwnerOf(kFirst), "t");
  // Finished instead, once t is back.
  shards_["t"].up = true;
  absl::StatusOr<MoveReport> report = MoveSlots(Options(), store_, admins_, clock_);
  ASSERT_TRUE(report.ok()) << report.status();
  ExpectMovedRows();
}

TEST_F(AbortRace, NegativeControlWithoutThePredecessorCompareTheRunHasTwoOwners) {
  BlindMapStore blind(store_);
  absl::StatusOr<MoveReport> aborted = AbortFromBeforeTheFlip(blind);
  EXPECT_TRUE(aborted.ok()) << aborted.status();
  EXPECT_EQ(OwnersOf(kFirst), 2);
}

TEST_F(MoverTest, AnAbortWithTheTargetDownLeavesItsCopyToTheNextMovesClear) {
  MoveOptions to_copy = Options();
  to_copy.stop_after = "copy";
  ASSERT_TRUE(MoveSlots(to_copy, store_, admins_, clock_).ok());
  shards_["t"].up = false;
  absl::StatusOr<MoveReport> aborted = MoveSlots(Options(true), store_, admins_, clock_);
  ASSERT_TRUE(aborted.ok()) << aborted.status();
  EXPECT_EQ(aborted->outcome, "rolled back");
  EXPECT_EQ(shards_["t"].rows.count("0/k"), 1u);  // t could not drop it
  for (uint32_t slot = kFirst; slot <= kLast; ++slot) EXPECT_EQ(OwnersOf(slot), 1) << slot;
  // f goes on serving the run: a row goes away there while t's stale copy stays.
  shards_["f"].rows.erase("3/k");
  shards_["t"].up = true;
  absl::StatusOr<MoveReport> report = MoveSlots(Options(), store_, admins_, clock_);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(shards_["t"].rows.count("3/k"), 0u) << "a leftover of the aborted copy came back";
  EXPECT_EQ(shards_["t"].rows["4/k"], "v4");
}

// Finding 2: two runs of one move. `second` runs whole inside `first`, at the hook.
class TwoMovers : public MoverTest {
 protected:
  void SecondRunsWhole() {
    absl::StatusOr<MoveReport> second = MoveSlots(Options(), store_, admins_, clock_);
    EXPECT_TRUE(second.ok()) << second.status();
  }
  void ExpectOneHistory() {
    for (auto& [id, shard] : shards_) EXPECT_EQ(shard.epoch_conflicts, 0) << id;
    SlotMap map = *store_.Read();
    EXPECT_EQ(map.proto().migrations_size(), 0);
    for (uint32_t slot = kFirst; slot <= kLast; ++slot) EXPECT_EQ(map.OwnerOf(slot), "t");
    ExpectMovedRows();
  }
};

TEST_F(TwoMovers, FromOneEpochOneWinsTheFreezeAndTheOtherFindsItDone) {
  HookMapStore racing(store_, [this] { SecondRunsWhole(); });
  absl::StatusOr<MoveReport> first = MoveSlots(Options(), racing, admins_, clock_);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->outcome, "already there");
  EXPECT_EQ(first->lost_races, 1);
  ExpectOneHistory();
}

TEST_F(TwoMovers, NegativeControlWithoutThePredecessorCompareTheMapForksAndRowsAreLost) {
  BlindMapStore blind(store_);
  HookMapStore racing(blind, [this] { SecondRunsWhole(); });
  absl::StatusOr<MoveReport> first = MoveSlots(Options(), racing, admins_, clock_);
  // The late freeze was written over the finished move, from a map that no longer was.
  EXPECT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(shards_["t"].rows.count("0/k"), 0u);
  EXPECT_EQ(shards_["f"].rows.count("0/k"), 0u);
}

TEST_F(TwoMovers, ALateImportOfTheLoserIsRefusedAndBothEndConsistent) {
  // The first run is copying when the second takes the move over and finishes it.
  shards_["t"].before_import = [this] { SecondRunsWhole(); };
  absl::StatusOr<MoveReport> first = MoveSlots(Options(), store_, admins_, clock_);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->outcome, "already there");
  EXPECT_GE(first->lost_races, 1);
  ExpectOneHistory();
}

TEST_F(TwoMovers, AClearByAnotherRunMidCopyMakesTheFirstCopyAgain) {
  // The first run has imported a page when a second takes the move over, clears the new
  // owner and fails to export; the first must not flip on what is left.
  shards_["t"].hook_at_import = 2;
  shards_["t"].before_import = [this] {
    shards_["f"].export_fails = true;
    EXPECT_FALSE(MoveSlots(Options(), store_, admins_, clock_).ok());
    shards_["f"].export_fails = false;
  };
  MoveOptions o = Options();
  o.page_records = 1;
  absl::StatusOr<MoveReport> first = MoveSlots(o, store_, admins_, clock_);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->outcome, "moved");
  ExpectOneHistory();
}

TEST_F(MoverTest, WaitsForTheOldOwnersAcknowledgementWhereItCannotBeTold) {
  // f is reachable for its data, but its pushes are lost; it acknowledges in the store.
  MemoryLeaseOptions lease_options;
  shards_["f"].lease = store_.NewLease(lease_options);
  ASSERT_TRUE(shards_["f"].lease->Acquire("f", "f:1").ok());
  class AckingClock : public ManualClock {
   public:
    AckingClock(MemoryMapStore& store, FakeShard& f) : store_(store), f_(f) {}
    void SleepMs(int64_t ms) override {
      ManualClock::SleepMs(ms);
      // f's coordination thread: the newest map from the store, adopted and acknowledged.
      absl::StatusOr<SlotMap> map = store_.Read();
      if (map.ok()) f_.Adopt(*map).IgnoreError();
      ++sleeps;
    }
    int sleeps = 0;

   private:
    MemoryMapStore& store_;
    FakeShard& f_;
  } clock(store_, shards_["f"]);
  class NoPushToF : public FakeAdmin {
   public:
    using FakeAdmin::FakeAdmin;
    absl::StatusOr<uint64_t> Adopt(const SlotMap&, int64_t) override {
      return absl::UnavailableError("the push was lost");
    }
  };
  ShardAdminFactory admins = [this](const std::string& address) -> std::unique_ptr<ShardAdmin> {
    FakeShard& shard = shards_[address.substr(0, address.find(':'))];
    if (shard.id == "f") return std::make_unique<NoPushToF>(shard);
    return std::make_unique<FakeAdmin>(shard);
  };
  MoveOptions o = Options();
  o.stop_after = "freeze";
  absl::StatusOr<MoveReport> report = MoveSlots(o, store_, admins, clock);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_GE(clock.sleeps, 1);
  EXPECT_GE(store_.Presence("f")->held_epoch, report->epoch);
  // Without an acknowledgement the move does not go on.
  shards_["f"].lease->Release();
  o.stop_after = "";
  report = MoveSlots(o, store_, admins, clock_);
  EXPECT_EQ(ReasonOf(report.status()), "NOT_ACKNOWLEDGED") << report.status();
}

}  // namespace
}  // namespace eonce
