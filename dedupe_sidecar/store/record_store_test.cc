#include "dedupe_sidecar/store/record_store.h"

#include <functional>
#include <set>

#include "common/coord/slots.h"
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
    // store_ reads RocksDB on every Get (no FinishedAnswers), so that these tests prove the
    // store's own rules; cached_ is a second reader and writer of the same records that
    // keeps the answers it writes in memory, checked against store_.
    store_ = std::make_unique<RecordStore>(*rocks_, clock_, RetentionOptions{1'000, 10'000},
                                           /*finished_cache_bytes=*/0);
    cached_ = std::make_unique<RecordStore>(*rocks_, clock_, RetentionOptions{1'000, 10'000});
  }

  // Both readers give the same answer for (acme, key); returns it.
  std::optional<Record> ReadBoth(const std::string& key) {
    auto stored = store_->Get("acme", key);
    auto cached = cached_->Get("acme", key);
    EXPECT_TRUE(stored.ok() && cached.ok());
    if (!stored.ok() || !cached.ok()) return std::nullopt;
    EXPECT_EQ(stored->has_value(), cached->has_value()) << key;
    if (stored->has_value() && cached->has_value()) {
      EXPECT_EQ((*stored)->SerializeAsString(), (*cached)->SerializeAsString()) << key;
    }
    return *cached;
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
  std::unique_ptr<RecordStore> cached_;
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

// FinishedAnswers: what a finished record's writer keeps in memory is what the store would
// answer, through its trim and its drop.
TEST_F(RecordStoreTest, FinishedRecordsAreAnsweredFromMemoryAsTheStoreAnswers) {
  ASSERT_TRUE(cached_->Write(Committed("k", "r"), Record::STATE_UNSPECIFIED, false).ok());
  Record started = Committed("s", "");
  started.set_state(Record::STARTED);
  ASSERT_TRUE(cached_->Write(started, Record::STATE_UNSPECIFIED, false).ok());
  const FinishedAnswers& answers = cached_->finished_answers();

  std::optional<Record> read = ReadBoth("k");
  ASSERT_TRUE(read.has_value());
  EXPECT_EQ(read->result().response(), "r");
  EXPECT_EQ(answers.hits(), 1);
  ASSERT_TRUE(ReadBoth("s").has_value());  // a started record is not kept
  EXPECT_EQ(answers.hits(), 1);
  EXPECT_EQ(answers.entries(), 1u);

  clock_.AdvanceMs(1'000);  // the retention: a tombstone now, in memory as on disk
  ASSERT_TRUE(cached_->CompactAll().ok());
  read = ReadBoth("k");
  ASSERT_TRUE(read.has_value());
  EXPECT_TRUE(read->tombstone());
  EXPECT_TRUE(read->result().response().empty());
  EXPECT_EQ(answers.hits(), 2);

  clock_.AdvanceMs(9'000);  // the forensic retention: gone
  ASSERT_TRUE(cached_->CompactAll().ok());
  EXPECT_FALSE(ReadBoth("k").has_value());
  EXPECT_EQ(answers.hits(), 3);
}

TEST_F(RecordStoreTest, AnyOtherWriteOrDeleteOfAKeyTakesItsAnswerOutOfMemory) {
  // Rewritten as another state (an operator's park).
  Record parked = Committed("parked", "r");
  ASSERT_TRUE(cached_->Write(parked, Record::STATE_UNSPECIFIED, false).ok());
  parked.set_state(Record::PARKED);
  ASSERT_TRUE(cached_->Write(parked, Record::COMMITTED, false).ok());
  std::optional<Record> read = ReadBoth("parked");
  ASSERT_TRUE(read.has_value());
  EXPECT_EQ(read->state(), Record::PARKED);

  // Deleted (the key freed).
  Record freed = Committed("freed", "r");
  ASSERT_TRUE(cached_->Write(freed, Record::STATE_UNSPECIFIED, false).ok());
  ASSERT_TRUE(cached_->Delete(freed, false).ok());
  EXPECT_FALSE(ReadBoth("freed").has_value());

  // Overwritten by a slot's import.
  ASSERT_TRUE(cached_->Write(Committed("imported", "old"), Record::STATE_UNSPECIFIED, false).ok());
  ASSERT_TRUE(cached_->Import({Committed("imported", "new")}).ok());
  read = ReadBoth("imported");
  ASSERT_TRUE(read.has_value());
  EXPECT_EQ(read->result().response(), "new");

  // Dropped with its slot.
  Record moved = Committed("moved", "r");
  moved.mutable_entity()->set_type("account");
  moved.mutable_entity()->set_id("a1");
  ASSERT_TRUE(cached_->Write(moved, Record::STATE_UNSPECIFIED, false).ok());
  const uint32_t slot = SlotOf("acme", "account", "a1");
  auto dropped = cached_->DropSlots(slot, slot);
  ASSERT_TRUE(dropped.ok()) << dropped.status();
  EXPECT_EQ(*dropped, 1);
  EXPECT_FALSE(ReadBoth("moved").has_value());
  EXPECT_EQ(cached_->finished_answers().entries(), 0u);
}

// Reads that find a finished record in the store twice (written before a restart, or
// pushed out of memory since) keep it, so that the key's next retries are answered from
// memory.
TEST_F(RecordStoreTest, ReadsThatFindAFinishedRecordTwiceKeepItsAnswer) {
  ASSERT_TRUE(store_->Write(Committed("old", "r"), Record::STATE_UNSPECIFIED, false).ok());
  Record started = Committed("started", "");
  started.set_state(Record::STARTED);
  ASSERT_TRUE(store_->Write(started, Record::STATE_UNSPECIFIED, false).ok());
  const FinishedAnswers& answers = cached_->finished_answers();
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(ReadBoth("old").has_value());
    ASSERT_TRUE(ReadBoth("started").has_value());
  }
  EXPECT_EQ(answers.hits(), 1);    // "old" after its second read
  EXPECT_EQ(answers.misses(), 5);  // "old" twice, "started" each time
  EXPECT_EQ(answers.entries(), 1u);
}

// The clock of RecordStore::Get is read between its read of the store and its fill: a
// write there is one that came between the two.
class ClockWithAHook : public ManualClock {
 public:
  int64_t NowMs() override {
    std::function<void()> hook = std::move(hook_);
    hook_ = nullptr;
    if (hook) hook();
    return ManualClock::NowMs();
  }
  std::function<void()> hook_;
};

// A read of the old record races a write of the key, here an operator freeing it: its fill
// must not keep the old answer.
TEST_F(RecordStoreTest, AReadRacingAWriteOfItsKeyKeepsNothingOld) {
  ClockWithAHook clock;
  RecordStore racing(*rocks_, clock, RetentionOptions{1'000, 10'000});
  const Record committed = Committed("k", "r");
  ASSERT_TRUE(store_->Write(committed, Record::STATE_UNSPECIFIED, false).ok());
  ASSERT_TRUE(racing.Get("acme", "k").ok());  // noted: the next read's fill is admitted
  clock.hook_ = [&] { EXPECT_TRUE(racing.Delete(committed, false).ok()); };
  auto first = racing.Get("acme", "k");  // read before the delete, filled after it
  ASSERT_TRUE(first.ok());
  EXPECT_TRUE(first->has_value());
  auto second = racing.Get("acme", "k");
  ASSERT_TRUE(second.ok());
  EXPECT_FALSE(second->has_value());
  EXPECT_EQ(racing.finished_answers().entries(), 0u);
}

}  // namespace
}  // namespace eonce
