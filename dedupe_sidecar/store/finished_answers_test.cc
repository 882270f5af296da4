#include "dedupe_sidecar/store/finished_answers.h"

#include <malloc.h>

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace eonce {
namespace {

FinishedAnswers::Entry Answer(const std::string& response) {
  FinishedAnswers::Entry entry;
  entry.record.set_state(internal::IdempotencyRecord::COMMITTED);
  entry.record.mutable_result()->set_response(response);
  entry.drop_at_ms = 2'000;
  entry.trim_at_ms = 1'000;
  return entry;
}

// `entry` as the store holds it, and as it is put in memory.
FinishedAnswers::Stored Kept(const FinishedAnswers::Entry& entry) {
  return FinishedAnswers::Stored{entry.record.SerializeAsString(), entry.drop_at_ms,
                                 entry.trim_at_ms};
}

// A write of `key` through the store that leaves `entry` in memory, and one that leaves
// nothing.
void Put(FinishedAnswers& answers, const std::string& key, const FinishedAnswers::Entry& entry) {
  FinishedAnswers::Stored stored = Kept(entry);
  answers.BeginWrite(key);
  answers.EndWrite(key, &stored);
}
void Erase(FinishedAnswers& answers, const std::string& key) {
  answers.BeginWrite(key);
  answers.EndWrite(key, nullptr);
}

// Keys that all fall in one shard, so that the order of eviction is the shard's own.
std::vector<std::string> KeysOfOneShard(int count) {
  std::vector<std::string> keys;
  for (int i = 0; static_cast<int>(keys.size()) < count; ++i) {
    std::string key = std::to_string(100'000 + i);  // all of one length
    if (FinishedAnswers::ShardIndexOf(key) == 0) keys.push_back(key);
  }
  return keys;
}

// Looks `key` up twice, which both miss: the ticket of the second admits a fill.
FinishedAnswers::Ticket MissTwice(FinishedAnswers& answers, const std::string& key) {
  FinishedAnswers::Entry got;
  FinishedAnswers::Ticket ticket;
  EXPECT_FALSE(answers.Get(key, &got, &ticket));
  EXPECT_FALSE(ticket.admitted);
  EXPECT_FALSE(answers.Get(key, &got, &ticket));
  EXPECT_TRUE(ticket.admitted);
  return ticket;
}

TEST(FinishedAnswersTest, GivesBackWhatWasPutWithItsTimes) {
  FinishedAnswers answers;
  FinishedAnswers::Entry put = Answer("r");
  put.record.set_tenant("acme");
  put.record.set_idempotency_key("k");
  put.record.set_payload_hash(std::string(32, 'h'));
  put.record.set_attempts(3);
  Put(answers, "acme-k", put);
  FinishedAnswers::Entry got;
  got.record.set_actor("left from before");  // replaced, not merged into
  ASSERT_TRUE(answers.Get("acme-k", &got));
  EXPECT_EQ(got.record.result().response(), "r");
  EXPECT_EQ(got.record.SerializeAsString(), put.record.SerializeAsString());
  EXPECT_EQ(got.trim_at_ms, 1'000);
  EXPECT_EQ(got.drop_at_ms, 2'000);
  EXPECT_FALSE(answers.Get("other", &got));
  EXPECT_EQ(answers.hits(), 1);
  EXPECT_EQ(answers.misses(), 1);
}

TEST(FinishedAnswersTest, APutReplacesAndAnEraseRemoves) {
  FinishedAnswers answers;
  Put(answers, "k", Answer("first"));
  const size_t one = answers.bytes();
  Put(answers, "k", Answer("again"));
  EXPECT_EQ(answers.entries(), 1u);
  EXPECT_EQ(answers.bytes(), one);
  FinishedAnswers::Entry got;
  ASSERT_TRUE(answers.Get("k", &got));
  EXPECT_EQ(got.record.result().response(), "again");
  Erase(answers, "k");
  EXPECT_FALSE(answers.Get("k", &got));
  EXPECT_EQ(answers.entries(), 0u);
  EXPECT_EQ(answers.bytes(), 0u);
}

TEST(FinishedAnswersTest, StaysWithinItsBytesAndEvictsTheLeastRecentlyUsed) {
  // Room for four entries of this size in each shard.
  const size_t cost = 6 + Answer(std::string(100, 'x')).record.ByteSizeLong() +
                      FinishedAnswers::kEntryOverheadBytes;
  FinishedAnswers answers(FinishedAnswers::kShards * (4 * cost + cost / 2));
  std::vector<std::string> keys = KeysOfOneShard(6);
  for (int i = 0; i < 4; ++i) Put(answers, keys[i], Answer(std::string(100, 'x')));
  ASSERT_EQ(answers.entries(), 4u);
  FinishedAnswers::Entry got;
  ASSERT_TRUE(answers.Get(keys[0], &got));  // used: keys[1] is now the oldest
  Put(answers, keys[4], Answer(std::string(100, 'x')));
  Put(answers, keys[5], Answer(std::string(100, 'x')));
  EXPECT_EQ(answers.entries(), 4u);
  EXPECT_LE(answers.bytes(), 4 * cost);
  EXPECT_TRUE(answers.Get(keys[0], &got));
  EXPECT_FALSE(answers.Get(keys[1], &got));
  EXPECT_FALSE(answers.Get(keys[2], &got));
  EXPECT_TRUE(answers.Get(keys[3], &got));
  EXPECT_TRUE(answers.Get(keys[5], &got));

  // Many more than fit, over every shard: never past the bound.
  for (int i = 0; i < 10'000; ++i) {
    Put(answers, "many" + std::to_string(i), Answer(std::string(100, 'x')));
  }
  EXPECT_LE(answers.bytes(), FinishedAnswers::kShards * (4 * cost + cost / 2));
  EXPECT_TRUE(answers.Get("many9999", &got));

  // Fills are held to the same bound.
  for (int i = 0; i < 10'000; ++i) {
    const std::string key = "filled" + std::to_string(i);
    answers.Fill(key, Kept(Answer(std::string(100, 'x'))), MissTwice(answers, key));
  }
  EXPECT_LE(answers.bytes(), FinishedAnswers::kShards * (4 * cost + cost / 2));
  EXPECT_TRUE(answers.Get("filled9999", &got));
}

// A read of the store found a key's old record; a fill of it is kept only if no write of
// the key's shard began or ended since the read's lookup missed, and none is under way.
TEST(FinishedAnswersTest, AFillIsKeptOnlyIfNoWriteCameBetweenItsMissAndIt) {
  FinishedAnswers answers;
  FinishedAnswers::Entry got;

  answers.Fill("k", Kept(Answer("read")), MissTwice(answers, "k"));
  ASSERT_TRUE(answers.Get("k", &got));
  EXPECT_EQ(got.record.result().response(), "read");

  // A write began and ended between the miss and the fill.
  FinishedAnswers::Ticket ticket = MissTwice(answers, "a");
  answers.BeginWrite("a");
  FinishedAnswers::Stored written = Kept(Answer("written"));
  answers.EndWrite("a", &written);
  answers.Fill("a", Kept(Answer("stale")), ticket);
  ASSERT_TRUE(answers.Get("a", &got));
  EXPECT_EQ(got.record.result().response(), "written");

  // A write of the key began after the miss and has not ended.
  ticket = MissTwice(answers, "b");
  answers.BeginWrite("b");
  answers.Fill("b", Kept(Answer("stale")), ticket);
  EXPECT_FALSE(answers.Get("b", &got));

  // The misses came while that write was under way: the ticket is current, the write is
  // not over, and the fill is refused all the same.
  ticket = MissTwice(answers, "b");
  answers.Fill("b", Kept(Answer("stale")), ticket);
  EXPECT_FALSE(answers.Get("b", &got));
  answers.EndWrite("b", nullptr);  // the new record is not finished
  answers.Fill("b", Kept(Answer("stale")), ticket);
  EXPECT_FALSE(answers.Get("b", &got));
  EXPECT_EQ(answers.entries(), 2u);
}

// A key read once is only noted; the next miss of it admits its fill. Keys read once each
// over a large store leave the memory as it was.
TEST(FinishedAnswersTest, AKeyIsFilledOnlyWhenItMissesTwice) {
  FinishedAnswers answers;
  FinishedAnswers::Entry got;
  FinishedAnswers::Ticket ticket;
  for (int i = 0; i < 100'000; ++i) {
    const std::string key = "once" + std::to_string(i);
    ASSERT_FALSE(answers.Get(key, &got, &ticket));
    EXPECT_FALSE(ticket.admitted) << key;
    answers.Fill(key, Kept(Answer("r")), ticket);
  }
  EXPECT_EQ(answers.entries(), 0u);
  answers.Fill("twice", Kept(Answer("r")), MissTwice(answers, "twice"));
  EXPECT_TRUE(answers.Get("twice", &got));
}

// Keys retried in turn, more of them in one shard than half the fingerprints it notes:
// none pushes out the fingerprint of another for good, so after a few rounds every one is
// answered from memory.
TEST(FinishedAnswersTest, KeysRetriedInTurnAreAllFilled) {
  FinishedAnswers answers;
  const std::vector<std::string> keys = KeysOfOneShard(300);
  FinishedAnswers::Entry got;
  for (int round = 0; round < 4; ++round) {
    for (const std::string& key : keys) {
      FinishedAnswers::Ticket ticket;
      if (!answers.Get(key, &got, &ticket)) answers.Fill(key, Kept(Answer("r")), ticket);
    }
  }
  EXPECT_EQ(answers.entries(), keys.size());
}

TEST(FinishedAnswersTest, AFillNeverReplacesAnEntry) {
  FinishedAnswers answers;
  std::vector<std::string> keys = KeysOfOneShard(2);
  Put(answers, keys[0], Answer("written"));
  FinishedAnswers::Entry got;
  FinishedAnswers::Ticket ticket = MissTwice(answers, keys[1]);  // current, admitted
  answers.Fill(keys[0], Kept(Answer("read")), ticket);
  ASSERT_TRUE(answers.Get(keys[0], &got));
  EXPECT_EQ(got.record.result().response(), "written");
}

// The bound in bytes is what the entries take on the heap, within a quarter, for records
// like the sidecar's own (a transfer's answer).
TEST(FinishedAnswersTest, ItsBytesAreWhatItsEntriesTakeOnTheHeap) {
  FinishedAnswers answers(size_t{1} << 30);
  constexpr int kEntries = 20'000;
  const size_t before = mallinfo2().uordblks;
  for (int i = 0; i < kEntries; ++i) {
    FinishedAnswers::Entry entry = Answer(std::string(24, 'r'));
    internal::IdempotencyRecord& r = entry.record;
    r.set_tenant("bench");
    r.set_idempotency_key("fs-64-" + std::to_string(100'000 + i));
    r.set_command_id("cmd-" + r.idempotency_key());
    r.set_actor("bench-agent");
    r.set_operation("/ledger.v1.Ledger/Transfer");
    r.set_payload_hash(std::string(32, 'h'));
    r.set_fencing_token(1);
    r.set_first_seen_ms(1'700'000'000'000);
    r.set_updated_ms(1'700'000'000'000);
    r.set_attempts(1);
    const std::string key = "bench/" + r.idempotency_key();
    Put(answers, key, entry);
  }
  const size_t heap = mallinfo2().uordblks - before;
  if (heap == 0) GTEST_SKIP() << "the allocator does not report through mallinfo2";
  const double ratio = static_cast<double>(answers.bytes()) / static_cast<double>(heap);
  EXPECT_GT(ratio, 0.8) << answers.bytes() << " counted for " << heap << " on the heap";
  EXPECT_LT(ratio, 1.25) << answers.bytes() << " counted for " << heap << " on the heap";
}

TEST(FinishedAnswersTest, KeepsNothingLargerThanAShardOrWhenTurnedOff) {
  FinishedAnswers small(FinishedAnswers::kShards * 1'000);
  Put(small, "big", Answer(std::string(2'000, 'x')));
  FinishedAnswers::Entry got;
  EXPECT_FALSE(small.Get("big", &got));
  EXPECT_EQ(small.bytes(), 0u);

  FinishedAnswers off(0);
  Put(off, "k", Answer("r"));
  FinishedAnswers::Ticket ticket;
  EXPECT_FALSE(off.Get("k", &got, &ticket));
  EXPECT_FALSE(off.Get("k", &got, &ticket));
  ticket.admitted = true;
  off.Fill("k", Kept(Answer("r")), ticket);
  EXPECT_FALSE(off.Get("k", &got));
  EXPECT_EQ(off.entries(), 0u);
}

}  // namespace
}  // namespace eonce
