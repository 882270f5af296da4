// Judge: what became of each accepted command, against the services' effects.
#include "gtest/gtest.h"
#include "tests/util/ground_truth.h"

namespace eonce::testing {
namespace {

v1::OutboxRecord In(v1::OutboxState state) {
  v1::OutboxRecord r;
  r.set_state(state);
  return r;
}

TEST(JudgeTest, EachAcceptedCommandIsCountedOnceByWhatBecameOfIt) {
  std::map<std::string, v1::OutboxRecord> records = {
      {"ok", In(v1::ACKED)},          {"case", In(v1::ACKED)},
      {"none", In(v1::ACKED)},        {"twice", In(v1::ACKED)},
      {"poor", In(v1::REJECTED)},     {"reused", In(v1::CONFLICT)},
      {"dead", In(v1::DEAD_LETTERED)}, {"old", In(v1::EXPIRED)},
      {"waiting", In(v1::QUEUED)},    {"unasked", In(v1::ACKED)}};
  std::set<std::string> accepted = {"ok",   "case", "none", "twice",  "poor",
                                    "reused", "dead", "old",  "waiting", "gone"};
  // The ledger and the case service hold the agent's commands; "legacy" is outside.
  std::map<std::string, int> ledger = {{"ok", 1}, {"twice", 2}};
  std::map<std::string, int> cases = {{"case", 1}};
  std::map<std::string, int> legacy = {{"direct", 2}};
  Judgement j = Judge(accepted, records, {ledger, cases}, {legacy});
  EXPECT_EQ(j.applied, 2);  // ok, case
  EXPECT_EQ(j.lost, 3);     // none (no effect), twice (two), gone (no record)
  EXPECT_EQ(j.rejected, 1);
  EXPECT_EQ(j.conflicts, 1);
  EXPECT_EQ(j.dead_letters, 1);
  EXPECT_EQ(j.other_final, 1);
  EXPECT_EQ(j.not_final, 1);
  EXPECT_EQ(j.duplicate_effects, 2);  // twice, and the legacy service's "direct"
  EXPECT_EQ(j.effects, 6);
}

TEST(JudgeTest, AnEffectInTheWrongServiceDoesNotCountAsApplied) {
  std::map<std::string, v1::OutboxRecord> records = {{"c1", In(v1::ACKED)}};
  Judgement j = Judge({"c1"}, records, {{}}, {{{"c1", 1}}});
  EXPECT_EQ(j.applied, 0);
  EXPECT_EQ(j.lost, 1);
}

}  // namespace
}  // namespace eonce::testing
