// The per-slot fence where the effect commits (SlotFences in the Inbox): a write of a
// former owner that was still in flight when its slot moved is refused with nothing
// applied, and a row of another slot than the call claims is never written. Real RocksDB.
#include <memory>
#include <string>

#include "common/coord/slots.h"
#include "common/base/status.h"
#include "gtest/gtest.h"
#include "services/inbox/inbox.h"
#include "tests/util/temp_dir.h"

namespace eonce {
namespace {

constexpr char kRowsCf[] = "rows";

std::vector<ColumnFamilySpec> Families(Clock& clock) {
  std::vector<ColumnFamilySpec> families = Inbox::ColumnFamilies(clock);
  families.push_back(ColumnFamilySpec{kRowsCf, {}});
  return families;
}

// One service's store and inbox, reopened on demand.
struct Shard {
  Shard(const std::string& dir, Clock& clock) : dir(dir), clock(clock) { Open(); }
  void Open() {
    inbox.reset();
    store.reset();
    auto opened = RocksStore::Open(dir, Families(clock), StoreOptions());
    ASSERT_TRUE(opened.ok()) << opened.status();
    store = std::move(*opened);
    inbox = std::make_unique<Inbox>(*store, clock, /*legacy_mode=*/false);
  }
  std::string Row(const std::string& key) {
    std::string value;
    return store->Get(kRowsCf, key, &value).ok() ? value : "<none>";
  }
  const std::string dir;
  Clock& clock;
  std::unique_ptr<RocksStore> store;
  std::unique_ptr<Inbox> inbox;
};

// A forward for `entity`'s slot at `epoch` (0: an unsharded sidecar's, with no slot).
CallIdentity Call(const std::string& command_id, const std::string& entity, uint64_t epoch) {
  CallIdentity id;
  id.command_id = command_id;
  id.tenant = "acme";
  id.idempotency_key = "key-" + command_id;
  id.entity_type = "account";
  id.entity_id = entity;
  if (epoch > 0) {
    id.slot = SlotOf("acme", "account", entity);
    id.slot_epoch = epoch;
  }
  return id;
}

// Writes `row_entity`'s row (default: the call's own entity) as one effect.
absl::StatusOr<v1::CallResult> Write(Inbox& inbox, const CallIdentity& id,
                                     const std::string& value, std::string row_entity = "") {
  if (row_entity.empty()) row_entity = id.entity_id;
  return inbox.Run(id, {row_entity}, [&](rocksdb::WriteBatch* batch, uint64_t) {
    inbox.PutEntityRow(batch, id.tenant, "account", row_entity, kRowsCf, row_entity, value);
    Applied applied;
    applied.result.set_response("ok");
    applied.effect = v1::Effect();
    return absl::StatusOr<Applied>(applied);
  });
}

uint32_t SlotOfAccount(const std::string& id) { return SlotOf("acme", "account", id); }

v1::ExportSlotDataRequest Export(uint32_t slot, uint64_t epoch) {
  v1::ExportSlotDataRequest request;
  request.set_first_slot(slot);
  request.set_last_slot(slot);
  request.set_epoch(epoch);
  return request;
}

v1::DropSlotDataRequest Drop(uint32_t slot, uint64_t epoch) {
  v1::DropSlotDataRequest request;
  request.set_first_slot(slot);
  request.set_last_slot(slot);
  request.set_epoch(epoch);
  return request;
}

class SlotFencesTest : public ::testing::Test {
 protected:
  // Whether the call was refused by the fence with nothing of it in the store.
  void ExpectFencedAndNothingApplied(Shard& shard, const absl::Status& status,
                                     const std::string& command_id, const std::string& row,
                                     const std::string& row_before) {
    EXPECT_TRUE(IsSlotFenced(status)) << status;
    EXPECT_EQ(shard.Row(row), row_before);
    EXPECT_FALSE(shard.inbox->QueryOutcome("acme", command_id)->applied());
  }

  ManualClock clock_;
  Shard a_{testing::FreshDir("fence-a"), clock_};
  Shard b_{testing::FreshDir("fence-b"), clock_};
};

TEST_F(SlotFencesTest, ALateWriteOfTheFormerOwnerAfterTheExportIsRefusedWithNothingApplied) {
  const uint32_t slot = SlotOfAccount("alice");
  ASSERT_TRUE(Write(*a_.inbox, Call("t1", "alice", 1), "90").ok());
  const int64_t applied = a_.inbox->applied();
  ASSERT_TRUE(a_.inbox->ExportSlotData(Export(slot, 2)).ok());
  EXPECT_EQ(a_.inbox->fences().fence(slot), 2u);

  // Admitted by the sidecar at epoch 1, before the freeze; lands after the copy.
  auto late = Write(*a_.inbox, Call("t2", "alice", 1), "0");
  ExpectFencedAndNothingApplied(a_, late.status(), "t2", "alice", "90");
  // A forward with no epoch, for a fenced slot: the same.
  auto unsharded = Write(*a_.inbox, Call("t3", "alice", 0), "0");
  ExpectFencedAndNothingApplied(a_, unsharded.status(), "t3", "alice", "90");
  EXPECT_EQ(a_.inbox->applied(), applied);
  // Another slot is not fenced.
  EXPECT_TRUE(Write(*a_.inbox, Call("t4", "carol", 1), "5").ok());
  ASSERT_NE(SlotOfAccount("carol"), slot);
}

TEST_F(SlotFencesTest, ANewerEpochRaisesTheFenceInItsOwnBatchAndTheFenceOutlivesARestart) {
  const uint32_t slot = SlotOfAccount("alice");
  ASSERT_TRUE(Write(*a_.inbox, Call("t1", "alice", 4), "90").ok());
  EXPECT_EQ(a_.inbox->fences().fence(slot), 4u);
  ASSERT_TRUE(a_.inbox->DropSlotData(Drop(slot, 6)).ok());
  a_.Open();  // loaded from the store
  EXPECT_EQ(a_.inbox->fences().fence(slot), 6u);
  EXPECT_TRUE(IsSlotFenced(Write(*a_.inbox, Call("t2", "alice", 5), "1").status()));
  EXPECT_TRUE(Write(*a_.inbox, Call("t3", "alice", 7), "1").ok());
  a_.Open();
  EXPECT_EQ(a_.inbox->fences().fence(slot), 7u);
  // A move's steps with an older epoch than the fence are refused too.
  EXPECT_TRUE(IsSlotFenced(a_.inbox->ExportSlotData(Export(slot, 6)).status()));
  EXPECT_TRUE(IsSlotFenced(a_.inbox->DropSlotData(Drop(slot, 6)).status()));
  EXPECT_EQ(a_.Row("alice"), "1");
  // ... and so is one that names no epoch.
  EXPECT_EQ(a_.inbox->ExportSlotData(Export(slot, 0)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(SlotFencesTest, AStaleImportAfterTheNewOwnerServedIsRefusedWhole) {
  const uint32_t slot = SlotOfAccount("alice");
  ASSERT_TRUE(Write(*a_.inbox, Call("t1", "alice", 1), "90").ok());
  auto exported = a_.inbox->ExportSlotData(Export(slot, 2));
  ASSERT_TRUE(exported.ok());
  v1::ImportSlotDataRequest import;
  import.set_first_slot(slot);
  import.set_last_slot(slot);
  import.set_epoch(2);
  *import.mutable_rows() = exported->rows();
  ASSERT_TRUE(b_.inbox->ImportSlotData(import).ok());
  EXPECT_EQ(b_.inbox->fences().fence(slot), 2u);
  // The new owner serves at the flipped epoch; a copy of the freeze arriving late (a
  // retried import) must not put the old row back.
  ASSERT_TRUE(Write(*b_.inbox, Call("t2", "alice", 3), "60").ok());
  auto stale = b_.inbox->ImportSlotData(import);
  EXPECT_TRUE(IsSlotFenced(stale.status())) << stale.status();
  EXPECT_EQ(b_.Row("alice"), "60");

  // An abort's drop on the target fences its leftovers: a copy of the aborted move
  // arriving after it is refused.
  ASSERT_TRUE(b_.inbox->DropSlotData(Drop(slot, 5)).ok());
  import.set_epoch(4);
  EXPECT_TRUE(IsSlotFenced(b_.inbox->ImportSlotData(import).status()));
  EXPECT_EQ(b_.Row("alice"), "<none>");
}

TEST_F(SlotFencesTest, ARowOfAnotherSlotThanTheCallClaimsIsNeverWritten) {
  // The caller declared alice (the gate let it in for alice's slot), the business writes
  // carol's row: refused, and nothing of the call is written.
  ASSERT_NE(SlotOfAccount("alice"), SlotOfAccount("carol"));
  auto result = Write(*a_.inbox, Call("t1", "alice", 1), "1000", "carol");
  EXPECT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ReasonOf(result.status()), "ENTITY_SLOT_MISMATCH") << result.status();
  EXPECT_EQ(a_.Row("carol"), "<none>");
  EXPECT_FALSE(a_.inbox->QueryOutcome("acme", "t1")->applied());
  EXPECT_EQ(a_.inbox->applied(), 0);
  // A claim of one slot for an entity of another: refused before anything runs.
  CallIdentity lying = Call("t2", "alice", 1);
  lying.slot = SlotOfAccount("carol");
  EXPECT_EQ(ReasonOf(Write(*a_.inbox, lying, "1", "carol").status()), "ENTITY_SLOT_MISMATCH");
  EXPECT_EQ(a_.Row("carol"), "<none>");
  // The claimed slot's own rows are written.
  EXPECT_TRUE(Write(*a_.inbox, Call("t3", "alice", 1), "7").ok());
  EXPECT_EQ(a_.Row("alice"), "7");
}

TEST_F(SlotFencesTest, AnExportHandsTheSlotOffUntilANewerEpochTakesItBack) {
  const uint32_t slot = SlotOfAccount("alice");
  ASSERT_TRUE(Write(*a_.inbox, Call("t1", "alice", 1), "90").ok());
  EXPECT_FALSE(a_.inbox->fences().handed_off(slot));
  ASSERT_TRUE(a_.inbox->ExportSlotData(Export(slot, 2)).ok());
  EXPECT_TRUE(a_.inbox->fences().handed_off(slot));
  // No map lets a shard write the slot here at the export's epoch (it is moving).
  EXPECT_TRUE(IsSlotFenced(Write(*a_.inbox, Call("t2", "alice", 2), "1").status()));
  a_.Open();
  EXPECT_TRUE(a_.inbox->fences().handed_off(slot));
  // The move was aborted: the slot is served here again at the abort's epoch.
  ASSERT_TRUE(Write(*a_.inbox, Call("t3", "alice", 3), "80").ok());
  EXPECT_FALSE(a_.inbox->fences().handed_off(slot));
  a_.Open();
  EXPECT_FALSE(a_.inbox->fences().handed_off(slot));
  EXPECT_EQ(a_.inbox->fences().fence(slot), 3u);
}

v1::HoldSlotDataRequest Hold(uint32_t first, uint32_t last, uint64_t epoch) {
  v1::HoldSlotDataRequest request;
  request.set_first_slot(first);
  request.set_last_slot(last);
  request.set_epoch(epoch);
  return request;
}

TEST_F(SlotFencesTest, AnAbortedExportIsTakenBackByTheOwnersHoldBeforeAnyWrite) {
  const uint32_t slot = SlotOfAccount("alice");
  ASSERT_TRUE(Write(*a_.inbox, Call("t1", "alice", 1), "90").ok());
  ASSERT_TRUE(a_.inbox->ExportSlotData(Export(slot, 2)).ok());
  ASSERT_TRUE(a_.inbox->fences().handed_off(slot));
  // A map at the export's own epoch never gives the slot here: the hold leaves it.
  EXPECT_EQ(a_.inbox->HoldSlotData(Hold(slot, slot, 2))->held(), 0);
  EXPECT_TRUE(a_.inbox->fences().handed_off(slot));
  // The abort's map (epoch 3) gives the slot back; no write to it has landed yet.
  EXPECT_EQ(a_.inbox->HoldSlotData(Hold(slot, slot, 3))->held(), 1);
  EXPECT_FALSE(a_.inbox->fences().handed_off(slot));
  EXPECT_EQ(a_.inbox->fences().fence(slot), 3u);
  a_.Open();  // synced and loaded
  EXPECT_FALSE(a_.inbox->fences().handed_off(slot));
  EXPECT_EQ(a_.inbox->fences().fence(slot), 3u);
  // Writes of the owning epoch go on; a write of an older one does not.
  EXPECT_TRUE(Write(*a_.inbox, Call("t2", "alice", 3), "80").ok());
  EXPECT_TRUE(IsSlotFenced(Write(*a_.inbox, Call("t3", "alice", 2), "0").status()));
  // A hold of an older epoch than the fence (the slot moved on) changes nothing.
  ASSERT_TRUE(a_.inbox->DropSlotData(Drop(slot, 5)).ok());
  EXPECT_EQ(a_.inbox->HoldSlotData(Hold(slot, slot, 4))->held(), 0);
  EXPECT_TRUE(a_.inbox->fences().handed_off(slot));
  EXPECT_EQ(a_.inbox->fences().fence(slot), 5u);
  EXPECT_EQ(a_.inbox->HoldSlotData(Hold(slot, slot, 0)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(SlotFencesTest, AnImportLeavesItsSlotsHandedOffUntilTheOwnerHoldsThem) {
  const uint32_t slot = SlotOfAccount("alice");
  ASSERT_TRUE(Write(*a_.inbox, Call("t1", "alice", 1), "90").ok());
  auto exported = a_.inbox->ExportSlotData(Export(slot, 2));
  ASSERT_TRUE(exported.ok());
  v1::ImportSlotDataRequest import;
  import.set_first_slot(slot);
  import.set_last_slot(slot);
  import.set_epoch(2);
  *import.mutable_rows() = exported->rows();
  ASSERT_TRUE(b_.inbox->ImportSlotData(import).ok());
  // The copy is not the slot's until the map gives it here: an abort may leave it behind.
  EXPECT_EQ(b_.inbox->fences().fence(slot), 2u);
  EXPECT_TRUE(b_.inbox->fences().handed_off(slot));
  b_.Open();
  EXPECT_TRUE(b_.inbox->fences().handed_off(slot));
  // A retried page of the same copy keeps it so.
  ASSERT_TRUE(b_.inbox->ImportSlotData(import).ok());
  EXPECT_TRUE(b_.inbox->fences().handed_off(slot));
  // The flip's map (epoch 3) gives the slot here.
  EXPECT_EQ(b_.inbox->HoldSlotData(Hold(slot, slot, 3))->held(), 1);
  EXPECT_FALSE(b_.inbox->fences().handed_off(slot));
  EXPECT_EQ(b_.Row("alice"), "90");
}

TEST_F(SlotFencesTest, AnUnshardedDeploymentNeverMeetsAFence) {
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(Write(*a_.inbox, Call("u" + std::to_string(i), "alice", 0), "1").ok());
  }
  EXPECT_EQ(a_.inbox->fences().fence(SlotOfAccount("alice")), 0u);
}

}  // namespace
}  // namespace eonce
