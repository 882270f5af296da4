#include "dedupe_sidecar/record_store.h"

#include <set>

#include "common/slots.h"
#include "dedupe_sidecar/audit_log.h"
#include "gtest/gtest.h"
#include "tests/util/temp_dir.h"

namespace eonce {
namespace {

class RecordStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto families = RecordStore::ColumnFamilies(filters_);
    auto rocks = RocksStore::Open(testing::FreshDir("records"), families, StoreOptions());
    ASSERT_TRUE(rocks.ok()) << rocks.status();
    rocks_ = std::move(*rocks);
    store_ = std::make_unique<RecordStore>(*rocks_, clock_, RetentionOptions{1'000, 10'000});
  }

  Record Committed(const std::string& key, const std::string& response) {
    Record r;
    r.set_state(Record::COMMITTED);
    r.set_tenant("acme");
    r.set_idempotency_key(key);
    r.set_command_id("cmd-" + key);
    r.set_payload_hash("hash-" + key);
    r.mutable_result()->set_response(response);
    r.set_updated_ms(clock_.NowMs());
    return r;
  }

  ManualClock clock_;
  RecordStoreFilters filters_{clock_};
  std::unique_ptr<RocksStore> rocks_;
  std::unique_ptr<RecordStore> store_;
};

TEST_F(RecordStoreTest, NoDedupeMissBeforeExpiryAcrossManyCompactions) {
  for (int i = 0; i < 1000; ++i) {
    ASSERT_TRUE(store_->Write(Committed("k" + std::to_string(i), "r"), Record::STATE_UNSPECIFIED,
                              false)
                    .ok());
  }
  int misses = 0;
  for (int round = 0; round < 9; ++round) {
    clock_.AdvanceMs(100);  // 900 ms in all, inside the 1 s retention
    ASSERT_TRUE(store_->CompactAll().ok());
    for (int i = 0; i < 1000; ++i) {
      auto r = store_->Get("acme", "k" + std::to_string(i));
      ASSERT_TRUE(r.ok());
      if (!r->has_value() || (*r)->tombstone() || (*r)->result().response() != "r") ++misses;
    }
  }
  EXPECT_EQ(misses, 0);
  EXPECT_EQ(filters_.stats.trimmed.load(), 0);
}

TEST_F(RecordStoreTest, TombstoneOutlivesTheBodyThenGoes) {
  ASSERT_TRUE(store_->Write(Committed("k", std::string(1000, 'x')), Record::STATE_UNSPECIFIED,
                            true)
                  .ok());
  clock_.AdvanceMs(1'000);
  ASSERT_TRUE(store_->CompactAll().ok());
  auto r = store_->Get("acme", "k");
  ASSERT_TRUE(r.ok() && r->has_value());
  EXPECT_TRUE((*r)->tombstone());
  EXPECT_EQ((*r)->payload_hash(), "hash-k");
  EXPECT_TRUE((*r)->result().response().empty());
  EXPECT_EQ(filters_.stats.trimmed.load(), 1);
  // The command-id index follows the record's lifetime.
  EXPECT_TRUE(store_->KeyOfCommand("acme", "cmd-k")->has_value());

  clock_.AdvanceMs(9'000);
  ASSERT_TRUE(store_->CompactAll().ok());
  EXPECT_FALSE(store_->Get("acme", "k")->has_value());
  EXPECT_FALSE(store_->KeyOfCommand("acme", "cmd-k")->has_value());
  // Gone from disk, not just hidden by the read rule.
  std::string raw;
  EXPECT_TRUE(rocks_->db()
                  ->Get(rocksdb::ReadOptions(), rocks_->cf("records"), ScopedKey("acme", "k"),
                        &raw)
                  .IsNotFound());
  EXPECT_GE(filters_.stats.dropped.load(), 2);
}

TEST_F(RecordStoreTest, StartedAndParkedRecordsNeverExpire) {
  Record started = Committed("s", "");
  started.set_state(Record::STARTED);
  Record parked = Committed("p", "");
  parked.set_state(Record::PARKED);
  ASSERT_TRUE(store_->Write(started, Record::STATE_UNSPECIFIED, true).ok());
  ASSERT_TRUE(store_->Write(parked, Record::STARTED, true).ok());
  EXPECT_EQ(store_->parked_count(), 1);
  clock_.AdvanceMs(1'000'000);
  ASSERT_TRUE(store_->CompactAll().ok());
  EXPECT_TRUE(store_->Get("acme", "s")->has_value());
  EXPECT_TRUE(store_->Get("acme", "p")->has_value());
  auto listed = store_->ListParked("acme", 10);
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].idempotency_key(), "p");
  ASSERT_TRUE(store_->Delete(parked, true).ok());
  EXPECT_EQ(store_->parked_count(), 0);
  EXPECT_TRUE(store_->ListParked("acme", 10)->empty());
}

// A move's copy: the records of a run of slots, paged, into another store with their
// index entries; then dropped from the first.
TEST_F(RecordStoreTest, ExportsImportsAndDropsTheRecordsOfARunOfSlots) {
  std::set<std::string> in_run;
  for (int i = 0; i < 200; ++i) {
    Record r = Committed("k" + std::to_string(i), "r");
    r.mutable_entity()->set_type("account");
    r.mutable_entity()->set_id("a" + std::to_string(i));
    if (SlotOf("acme", "account", r.entity().id()) < kSlotCount / 2) {
      in_run.insert(r.idempotency_key());
    }
    ASSERT_TRUE(store_->Write(r, Record::STATE_UNSPECIFIED, false).ok());
  }
  Record old = Committed("before-sharding", "r");  // names no entity
  ASSERT_TRUE(store_->Write(old, Record::STATE_UNSPECIFIED, false).ok());
  ASSERT_GT(in_run.size(), 50u);

  auto families = RecordStore::ColumnFamilies(filters_);
  auto rocks = RocksStore::Open(testing::FreshDir("records-to"), families, StoreOptions());
  ASSERT_TRUE(rocks.ok());
  RecordStore to(**rocks, clock_, RetentionOptions{1'000, 10'000});

  std::set<std::string> copied;
  std::string after;
  int64_t unplaced = 0;
  int pages = 0;
  do {
    auto page = store_->ExportSlots(0, kSlotCount / 2 - 1, after, 16, 1 << 20);
    ASSERT_TRUE(page.ok()) << page.status();
    ASSERT_LE(page->records.size(), 16u);
    for (const Record& r : page->records) EXPECT_TRUE(copied.insert(r.idempotency_key()).second);
    unplaced += page->unplaced;
    ASSERT_TRUE(to.Import(page->records).ok());
    after = page->next_after;
    ASSERT_LT(++pages, 100);
  } while (!after.empty());
  EXPECT_EQ(copied, in_run);
  EXPECT_EQ(unplaced, 1);
  for (const std::string& key : in_run) {
    auto moved = to.Get("acme", key);
    ASSERT_TRUE(moved.ok() && moved->has_value()) << key;
    EXPECT_EQ((*moved)->result().response(), "r");
    auto by_command = to.KeyOfCommand("acme", "cmd-" + key);
    ASSERT_TRUE(by_command.ok() && by_command->has_value());
    EXPECT_EQ(**by_command, key);
  }

  auto dropped = store_->DropSlots(0, kSlotCount / 2 - 1);
  ASSERT_TRUE(dropped.ok()) << dropped.status();
  EXPECT_EQ(*dropped, static_cast<int64_t>(in_run.size()));
  for (int i = 0; i < 200; ++i) {
    std::string key = "k" + std::to_string(i);
    auto left = store_->Get("acme", key);
    ASSERT_TRUE(left.ok());
    EXPECT_EQ(left->has_value(), in_run.count(key) == 0) << key;
  }
  auto kept = store_->Get("acme", "before-sharding");
  ASSERT_TRUE(kept.ok());
  EXPECT_TRUE(kept->has_value());
}

}  // namespace
}  // namespace eonce
