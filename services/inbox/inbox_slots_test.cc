// The inbox's transactional outbox (follow-ups) and its data by slot (export, import,
// drop), on real RocksDB stores.
#include <memory>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/store/crash_fs.h"
#include "common/coord/slots.h"
#include "common/base/status.h"
#include "eonce/internal/records.pb.h"
#include "gtest/gtest.h"
#include "services/inbox/inbox.h"
#include "tests/util/crash.h"
#include "tests/util/temp_dir.h"

namespace eonce {
namespace {

constexpr char kRowsCf[] = "rows";

std::vector<ColumnFamilySpec> Families(Clock& clock) {
  std::vector<ColumnFamilySpec> families = Inbox::ColumnFamilies(clock);
  families.push_back(ColumnFamilySpec{kRowsCf, {}});
  return families;
}

// One service's store and inbox.
struct Shard {
  Shard(const std::string& dir, Clock& clock, StoreOptions options = StoreOptions()) {
    auto opened = RocksStore::Open(dir, Families(clock), options);
    EXPECT_TRUE(opened.ok()) << opened.status();
    store = std::move(*opened);
    inbox = std::make_unique<Inbox>(*store, clock, /*legacy_mode=*/false);
  }
  std::unique_ptr<RocksStore> store;
  std::unique_ptr<Inbox> inbox;
};

CallIdentity Caller(const std::string& command_id, const std::string& entity_id,
                    const std::string& tenant = "acme") {
  CallIdentity id;
  id.command_id = command_id;
  id.tenant = tenant;
  id.idempotency_key = "key-" + command_id;
  id.entity_type = "account";
  id.entity_id = entity_id;
  return id;
}

// `id` as a sharded sidecar forwards it: with its entity's slot and the map's `epoch`.
CallIdentity Sharded(CallIdentity id, uint64_t epoch) {
  id.slot = SlotOf(id.tenant, id.entity_type, id.entity_id);
  id.slot_epoch = epoch;
  return id;
}

// Writes entity `entity_id`'s row ("balance") and, with `follow_up_to`, a follow-up for
// that entity, as one effect.
absl::StatusOr<v1::CallResult> Write(Inbox& inbox, const CallIdentity& id,
                                     const std::string& value,
                                     const std::string& follow_up_to = "") {
  return inbox.Run(id, {id.entity_id}, [&](rocksdb::WriteBatch* batch, uint64_t) {
    inbox.PutEntityRow(batch, id.tenant, "account", id.entity_id, kRowsCf, id.entity_id, value);
    Applied applied;
    applied.result.set_response("ok");
    applied.effect = v1::Effect();
    if (!follow_up_to.empty()) {
      applied.follow_ups.push_back(
          FollowUp{"/test.Ledger/Credit", "credit-" + id.command_id, "account", follow_up_to});
    }
    return absl::StatusOr<Applied>(applied);
  });
}

class InboxSlotsTest : public ::testing::Test {
 protected:
  ManualClock clock_;
  Shard a_{testing::FreshDir("slots-a"), clock_};
  Shard b_{testing::FreshDir("slots-b"), clock_};
};

TEST_F(InboxSlotsTest, AFollowUpIsWrittenWithItsEffectOnceAndHandedOutUntilAcked) {
  ASSERT_TRUE(Write(*a_.inbox, Caller("t1", "alice"), "90", "bob").ok());
  ASSERT_TRUE(Write(*a_.inbox, Caller("t1", "alice"), "90", "bob").ok());  // a repeat
  EXPECT_EQ(a_.inbox->follow_ups_pending(), 1);

  auto pulled = a_.inbox->PullFollowUps("acme", 10);
  ASSERT_TRUE(pulled.ok()) << pulled.status();
  ASSERT_EQ(pulled->follow_ups_size(), 1);
  const v1::Command& credit = pulled->follow_ups(0).command();
  EXPECT_EQ(credit.command_id(), Inbox::FollowUpCommandId("acme", "t1", 0));
  EXPECT_EQ(credit.tenant(), "acme");
  EXPECT_EQ(credit.target_method(), "/test.Ledger/Credit");
  EXPECT_EQ(credit.request(), "credit-t1");
  EXPECT_EQ(credit.entity().id(), "bob");
  // Pulled again until acknowledged: the relay may die between the two.
  EXPECT_EQ(a_.inbox->PullFollowUps("acme", 10)->follow_ups_size(), 1);

  // Another tenant neither sees nor acknowledges it.
  EXPECT_EQ(a_.inbox->PullFollowUps("globex", 10)->follow_ups_size(), 0);
  v1::AckFollowUpsRequest ack;
  ack.add_ids(pulled->follow_ups(0).id());
  EXPECT_EQ(a_.inbox->AckFollowUps("globex", ack).status().code(),
            absl::StatusCode::kInvalidArgument);

  EXPECT_EQ(a_.inbox->AckFollowUps("acme", ack)->acked(), 1);
  EXPECT_EQ(a_.inbox->AckFollowUps("acme", ack)->acked(), 0);  // idempotent
  EXPECT_EQ(a_.inbox->PullFollowUps("acme", 10)->follow_ups_size(), 0);
  EXPECT_EQ(a_.inbox->follow_ups_pending(), 0);
  // Two parents never derive the same follow-up id.
  EXPECT_NE(Inbox::FollowUpCommandId("acme", "t1", 0), Inbox::FollowUpCommandId("acme", "t2", 0));
  EXPECT_NE(Inbox::FollowUpCommandId("acme", "t1", 0), Inbox::FollowUpCommandId("acme", "t1", 1));
}

TEST_F(InboxSlotsTest, AFollowUpWithoutAnEffectIsRefusedAndNothingIsWritten) {
  CallIdentity id = Caller("t2", "alice");
  auto result = a_.inbox->Run(id, {"alice"}, [&](rocksdb::WriteBatch* batch, uint64_t) {
    batch->Put(a_.store->cf(kRowsCf), "alice", "half-written");
    Applied applied;
    applied.result.set_code(9);  // a rejection, with no effect
    applied.follow_ups.push_back(FollowUp{"/test.Ledger/Credit", "x", "account", "bob"});
    return absl::StatusOr<Applied>(applied);
  });
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(a_.inbox->PullFollowUps("acme", 10)->follow_ups_size(), 0);
  EXPECT_FALSE(a_.inbox->QueryOutcome("acme", "t2")->applied());
  std::string value;
  EXPECT_TRUE(a_.store->Get(kRowsCf, "alice", &value).IsNotFound());
}

TEST_F(InboxSlotsTest, ASlotsRowsAndInboxEntriesMoveAndTheOldCopyIsDropped) {
  const uint32_t slot = SlotOf("acme", "account", "alice");
  ASSERT_NE(slot, SlotOf("acme", "account", "carol"));
  ASSERT_TRUE(Write(*a_.inbox, Caller("t1", "alice"), "90").ok());
  ASSERT_TRUE(Write(*a_.inbox, Caller("t2", "carol"), "10").ok());

  v1::ExportSlotDataRequest export_request;
  export_request.set_first_slot(slot);
  export_request.set_last_slot(slot);
  export_request.set_epoch(2);  // the move's freeze
  auto exported = a_.inbox->ExportSlotData(export_request);
  ASSERT_TRUE(exported.ok()) << exported.status();
  EXPECT_TRUE(exported->next_after().empty());
  // alice's row, t1's inbox entry, its key's owner and its effect; nothing of carol's slot.
  ASSERT_EQ(exported->rows_size(), 4);
  for (const std::string& bytes : exported->rows()) {
    internal::SlotRow row;
    ASSERT_TRUE(row.ParseFromString(bytes));
    EXPECT_EQ(row.slot(), slot);
    EXPECT_EQ(row.key().find("carol"), std::string::npos);
  }

  v1::ImportSlotDataRequest import_request;
  import_request.set_first_slot(slot);
  import_request.set_last_slot(slot);
  import_request.set_epoch(2);
  *import_request.mutable_rows() = exported->rows();
  ASSERT_EQ(b_.inbox->ImportSlotData(import_request)->imported(), 4);
  // On the new shard: the row, and the command's outcome (a repeat gets it, no effect).
  std::string value;
  ASSERT_TRUE(b_.store->Get(kRowsCf, "alice", &value).ok());
  EXPECT_EQ(value, "90");
  EXPECT_TRUE(b_.inbox->QueryOutcome("acme", "t1")->applied());
  // (From the new owner's sidecar, after the flip: a newer epoch.)
  ASSERT_TRUE(Write(*b_.inbox, Sharded(Caller("t1", "alice"), 3), "80").ok());
  ASSERT_TRUE(b_.store->Get(kRowsCf, "alice", &value).ok());
  EXPECT_EQ(value, "90");
  EXPECT_EQ(b_.inbox->applied(), 0);
  // The key still belongs to t1 there: another command under it is refused.
  CallIdentity reuse = Sharded(Caller("t9", "alice"), 3);
  reuse.idempotency_key = "key-t1";
  EXPECT_TRUE(IsKeyConflict(Write(*b_.inbox, reuse, "0").status()));

  v1::DropSlotDataRequest drop;
  drop.set_first_slot(slot);
  drop.set_last_slot(slot);
  drop.set_epoch(3);
  EXPECT_EQ(a_.inbox->DropSlotData(drop)->dropped(), 4);
  EXPECT_EQ(a_.inbox->DropSlotData(drop)->dropped(), 0);
  EXPECT_TRUE(a_.store->Get(kRowsCf, "alice", &value).IsNotFound());
  EXPECT_FALSE(a_.inbox->QueryOutcome("acme", "t1")->applied());
  EXPECT_TRUE(a_.store->Get(kRowsCf, "carol", &value).ok());  // another slot stays
  export_request.set_epoch(3);
  EXPECT_EQ(a_.inbox->ExportSlotData(export_request)->rows_size(), 0);
}

// The effect and the follow-ups a call wrote are filed under its slot and move with it:
// the new owner's relay sends the credit a debit owes (the old owner's stops once it
// handed the slot off), the new owner lists the effect, and a page imported twice writes
// them once.
TEST_F(InboxSlotsTest, AnEffectAndItsFollowUpsMoveWithTheirSlotOnce) {
  const uint32_t slot = SlotOf("acme", "account", "alice");
  ASSERT_TRUE(Write(*a_.inbox, Sharded(Caller("t1", "alice"), 1), "90", "bob").ok());
  ASSERT_EQ(a_.inbox->follow_ups_pending(), 1);
  v1::ExportSlotDataRequest export_request;
  export_request.set_first_slot(slot);
  export_request.set_last_slot(slot);
  export_request.set_epoch(2);
  auto exported = a_.inbox->ExportSlotData(export_request);
  ASSERT_TRUE(exported.ok()) << exported.status();
  v1::ImportSlotDataRequest import_request;
  import_request.set_first_slot(slot);
  import_request.set_last_slot(slot);
  import_request.set_epoch(2);
  *import_request.mutable_rows() = exported->rows();
  for (int i = 0; i < 2; ++i) {  // a retried page
    auto imported = b_.inbox->ImportSlotData(import_request);
    ASSERT_TRUE(imported.ok()) << imported.status();
  }
  EXPECT_EQ(b_.inbox->follow_ups_pending(), 1);
  // Until the map gives b the slot, b's copy is not the slot's (an abort may leave it
  // behind): not relayed, not listed.
  EXPECT_EQ(b_.inbox->PullFollowUps("acme", 10)->follow_ups_size(), 0);
  EXPECT_EQ(b_.inbox->ListEffects(0, 100)->effects_size(), 0);
  v1::HoldSlotDataRequest hold;
  hold.set_first_slot(slot);
  hold.set_last_slot(slot);
  hold.set_epoch(3);  // the flip's map
  ASSERT_TRUE(b_.inbox->HoldSlotData(hold).ok());
  auto pulled = b_.inbox->PullFollowUps("acme", 10);
  ASSERT_TRUE(pulled.ok());
  ASSERT_EQ(pulled->follow_ups_size(), 1);
  EXPECT_EQ(pulled->follow_ups(0).command().command_id(),
            Inbox::FollowUpCommandId("acme", "t1", 0));
  // Handed off: a's relay no longer sends it, a no longer lists the effect.
  EXPECT_EQ(a_.inbox->PullFollowUps("acme", 10)->follow_ups_size(), 0);
  EXPECT_EQ(a_.inbox->ListEffects(0, 100)->effects_size(), 0);
  auto listed = b_.inbox->ListEffects(0, 100);
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->effects_size(), 1);
  EXPECT_EQ(listed->effects(0).command_id(), "t1");
  EXPECT_EQ(listed->effects(0).slot(), slot);

  v1::DropSlotDataRequest drop;
  drop.set_first_slot(slot);
  drop.set_last_slot(slot);
  drop.set_epoch(3);
  ASSERT_TRUE(a_.inbox->DropSlotData(drop).ok());
  EXPECT_EQ(a_.inbox->follow_ups_pending(), 0);
  // Moved back at a newer epoch: the rows come back, once.
  export_request.set_epoch(4);
  auto back = b_.inbox->ExportSlotData(export_request);
  ASSERT_TRUE(back.ok()) << back.status();
  import_request.set_epoch(4);
  *import_request.mutable_rows() = back->rows();
  ASSERT_TRUE(a_.inbox->ImportSlotData(import_request).ok());
  EXPECT_EQ(a_.inbox->follow_ups_pending(), 1);
  hold.set_epoch(5);
  ASSERT_TRUE(a_.inbox->HoldSlotData(hold).ok());
  EXPECT_EQ(a_.inbox->PullFollowUps("acme", 10)->follow_ups_size(), 1);
  EXPECT_EQ(a_.inbox->ListEffects(0, 100)->effects_size(), 1);
}

TEST_F(InboxSlotsTest, AnImportThatWouldOverwriteAnotherSlotsRowIsRefusedWhole) {
  // The same key, "alice", held by two tenants' entities (two slots) on two shards.
  const uint32_t acme_slot = SlotOf("acme", "account", "alice");
  ASSERT_NE(acme_slot, SlotOf("globex", "account", "alice"));
  ASSERT_TRUE(Write(*a_.inbox, Caller("t1", "alice"), "90").ok());
  ASSERT_TRUE(Write(*b_.inbox, Caller("g1", "alice", "globex"), "5").ok());
  v1::ExportSlotDataRequest export_request;
  export_request.set_first_slot(acme_slot);
  export_request.set_last_slot(acme_slot);
  export_request.set_epoch(2);
  auto exported = a_.inbox->ExportSlotData(export_request);
  ASSERT_TRUE(exported.ok());
  v1::ImportSlotDataRequest import_request;
  import_request.set_first_slot(acme_slot);
  import_request.set_last_slot(acme_slot);
  import_request.set_epoch(2);
  *import_request.mutable_rows() = exported->rows();
  auto imported = b_.inbox->ImportSlotData(import_request);
  EXPECT_EQ(imported.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ReasonOf(imported.status()), "ROW_CONFLICT");
  std::string value;
  ASSERT_TRUE(b_.store->Get(kRowsCf, "alice", &value).ok());
  EXPECT_EQ(value, "5");
  EXPECT_FALSE(b_.inbox->QueryOutcome("acme", "t1")->applied());  // nothing of it landed

  // A row of a slot outside the range is refused too.
  import_request.set_first_slot(acme_slot == 0 ? 1 : 0);
  import_request.set_last_slot(import_request.first_slot());
  EXPECT_EQ(b_.inbox->ImportSlotData(import_request).status().code(),
            absl::StatusCode::kInvalidArgument);
  import_request.set_first_slot(3);
  import_request.set_last_slot(kSlotCount);
  EXPECT_EQ(b_.inbox->ImportSlotData(import_request).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(InboxSlotsTest, AnExportIsPagedByBytesAndEveryRowArrivesOnce) {
  const uint32_t slot = SlotOf("acme", "account", "alice");
  // Three rows of the slot, each over half a page's bytes.
  std::vector<std::string> keys;
  for (int i = 0; i < 3; ++i) {
    rocksdb::WriteBatch batch;
    keys.push_back(absl::StrCat("big", i));
    a_.inbox->PutEntityRow(&batch, "acme", "account", "alice", kRowsCf, keys.back(),
                           std::string(Inbox::kMaxSlotDataBytes / 2 + 1, 'x'));
    ASSERT_TRUE(a_.store->Write(&batch, /*sync=*/true, "test").ok());
  }
  v1::ExportSlotDataRequest request;
  request.set_first_slot(slot);
  request.set_last_slot(slot);
  request.set_epoch(1);
  std::set<std::string> seen;
  int pages = 0;
  do {
    auto page = a_.inbox->ExportSlotData(request);
    ASSERT_TRUE(page.ok()) << page.status();
    EXPECT_LE(page->rows_size(), 2);
    for (const std::string& bytes : page->rows()) {
      internal::SlotRow row;
      ASSERT_TRUE(row.ParseFromString(bytes));
      EXPECT_TRUE(seen.insert(row.key()).second) << row.key() << " twice";
    }
    request.set_after(page->next_after());
    ASSERT_LT(++pages, 10);
  } while (!request.after().empty());
  EXPECT_EQ(seen, std::set<std::string>(keys.begin(), keys.end()));
  EXPECT_GE(pages, 2);
}

TEST_F(InboxSlotsTest, ExpiredInboxEntriesAreNotExported) {
  const uint32_t slot = SlotOf("acme", "account", "alice");
  ASSERT_TRUE(Write(*a_.inbox, Caller("t1", "alice"), "90").ok());
  clock_.AdvanceMs(Inbox::kDefaultEntryRetentionMs + 1);
  v1::ExportSlotDataRequest export_request;
  export_request.set_first_slot(slot);
  export_request.set_last_slot(slot);
  export_request.set_epoch(1);
  auto exported = a_.inbox->ExportSlotData(export_request);
  ASSERT_TRUE(exported.ok());
  // The row itself and the effect never expire; the inbox entry and key owner did.
  std::set<std::string> families;
  for (const std::string& bytes : exported->rows()) {
    internal::SlotRow row;
    ASSERT_TRUE(row.ParseFromString(bytes));
    families.insert(row.column_family());
  }
  EXPECT_EQ(families, (std::set<std::string>{kRowsCf, "effects"}));
}

// An inbox whose durability wait returns at once (a negative control).
class SkipsDurabilityInbox : public Inbox {
 public:
  using Inbox::Inbox;
  void WhenDurable(RocksStore::DurableFn done) override { done(absl::OkStatus()); }
};

// Writes 20 effects with follow-ups without waiting for them, pulls, cuts the power, and
// returns how many pulled follow-ups are gone after the restart.
template <typename InboxType>
int PulledButLostAfterPowerCut() {
  std::shared_ptr<CrashFileSystem> fs = NewCrashFileSystem();
  ManualClock clock;
  const std::string dir = testing::FreshDir("follow-ups-power");
  StoreOptions options;
  options.env = fs->env();
  auto opened = RocksStore::Open(dir, Families(clock), options);
  EXPECT_TRUE(opened.ok()) << opened.status();
  std::unique_ptr<RocksStore> store = std::move(*opened);
  std::vector<std::string> pulled;
  {
    InboxType inbox(*store, clock, /*legacy_mode=*/false);
    for (int i = 0; i < 20; ++i) {
      CallIdentity id = Caller(absl::StrCat("t", i), "alice");
      id.durability_by_caller = true;  // Run does not wait; the relay's pull must
      EXPECT_TRUE(Write(inbox, id, "1", "bob").ok());
    }
    auto page = inbox.PullFollowUps("acme", 100);
    EXPECT_TRUE(page.ok());
    for (const auto& follow_up : page->follow_ups()) pulled.push_back(follow_up.id());
  }
  EXPECT_EQ(pulled.size(), 20u);
  testing::CrashStore(*fs, store);
  opened = RocksStore::Open(dir, Families(clock), options);
  EXPECT_TRUE(opened.ok()) << opened.status();
  store = std::move(*opened);
  int lost = 0;
  for (const std::string& id : pulled) {
    std::string value;
    if (!store->Get("follow_ups", id, &value).ok()) ++lost;
  }
  return lost;
}

TEST(FollowUpPowerCutTest, AFollowUpIsHandedOutOnlyOnceItAndItsEffectAreDurable) {
  EXPECT_EQ(PulledButLostAfterPowerCut<Inbox>(), 0);
}

TEST(FollowUpPowerCutTest, NegativeControlHandingOutBeforeTheSyncIsCaught) {
  EXPECT_GT(PulledButLostAfterPowerCut<SkipsDurabilityInbox>(), 0);
}

}  // namespace
}  // namespace eonce
