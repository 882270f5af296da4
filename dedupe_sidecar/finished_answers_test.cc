#include "dedupe_sidecar/finished_answers.h"

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

// Keys that all fall in one shard, so that the order of eviction is the shard's own.
std::vector<std::string> KeysOfOneShard(int count) {
  std::vector<std::string> keys;
  for (int i = 0; static_cast<int>(keys.size()) < count; ++i) {
    std::string key = std::to_string(100'000 + i);  // all of one length
    if (FinishedAnswers::ShardIndexOf(key) == 0) keys.push_back(key);
  }
  return keys;
}

TEST(FinishedAnswersTest, GivesBackWhatWasPutWithItsTimes) {
  FinishedAnswers answers;
  answers.Put("acme-k", Answer("r"));
  FinishedAnswers::Entry got;
  ASSERT_TRUE(answers.Get("acme-k", &got));
  EXPECT_EQ(got.record.result().response(), "r");
  EXPECT_EQ(got.trim_at_ms, 1'000);
  EXPECT_EQ(got.drop_at_ms, 2'000);
  EXPECT_FALSE(answers.Get("other", &got));
  EXPECT_EQ(answers.hits(), 1);
  EXPECT_EQ(answers.misses(), 1);
}

TEST(FinishedAnswersTest, APutReplacesAndAnEraseRemoves) {
  FinishedAnswers answers;
  answers.Put("k", Answer("first"));
  const size_t one = answers.bytes();
  answers.Put("k", Answer("again"));
  EXPECT_EQ(answers.entries(), 1u);
  EXPECT_EQ(answers.bytes(), one);
  FinishedAnswers::Entry got;
  ASSERT_TRUE(answers.Get("k", &got));
  EXPECT_EQ(got.record.result().response(), "again");
  answers.Erase("k");
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
  for (int i = 0; i < 4; ++i) answers.Put(keys[i], Answer(std::string(100, 'x')));
  ASSERT_EQ(answers.entries(), 4u);
  FinishedAnswers::Entry got;
  ASSERT_TRUE(answers.Get(keys[0], &got));  // used: keys[1] is now the oldest
  answers.Put(keys[4], Answer(std::string(100, 'x')));
  answers.Put(keys[5], Answer(std::string(100, 'x')));
  EXPECT_EQ(answers.entries(), 4u);
  EXPECT_LE(answers.bytes(), 4 * cost);
  EXPECT_TRUE(answers.Get(keys[0], &got));
  EXPECT_FALSE(answers.Get(keys[1], &got));
  EXPECT_FALSE(answers.Get(keys[2], &got));
  EXPECT_TRUE(answers.Get(keys[3], &got));
  EXPECT_TRUE(answers.Get(keys[5], &got));

  // Many more than fit, over every shard: never past the bound.
  for (int i = 0; i < 10'000; ++i) {
    answers.Put("many" + std::to_string(i), Answer(std::string(100, 'x')));
  }
  EXPECT_LE(answers.bytes(), FinishedAnswers::kShards * (4 * cost + cost / 2));
  EXPECT_TRUE(answers.Get("many9999", &got));
}

TEST(FinishedAnswersTest, KeepsNothingLargerThanAShardOrWhenTurnedOff) {
  FinishedAnswers small(FinishedAnswers::kShards * 1'000);
  small.Put("big", Answer(std::string(2'000, 'x')));
  FinishedAnswers::Entry got;
  EXPECT_FALSE(small.Get("big", &got));
  EXPECT_EQ(small.bytes(), 0u);

  FinishedAnswers off(0);
  off.Put("k", Answer("r"));
  EXPECT_FALSE(off.Get("k", &got));
  EXPECT_EQ(off.entries(), 0u);
}

}  // namespace
}  // namespace eonce
