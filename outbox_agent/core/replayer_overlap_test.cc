// Overlapping rounds: while one round is at the sidecar, the next is claimed and sent, up
// to max_in_flight attempts in all; the rules hold across rounds as within one: one
// attempt per entity in flight, lane heads only, each entity's commands sent in enqueue
// order, a failed head retried before the commands behind it.
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/callback_batch.h"
#include "outbox_agent/core/replayer_test_fixture.h"

namespace eonce {
namespace {

class ReplayerOverlapTest : public ReplayerTest {
 protected:
  ReplayerOverlapTest() {
    replayer_.reset();
    options_.max_in_flight = 8;
    options_.max_round = 3;
    replayer_ = std::make_unique<Replayer>(*store_, sidecar_, *credential_, clock_, random_,
                                           options_, &feed_);
    sidecar_.set_hold(true);
  }

  static std::string LaneOf(const std::string& id) { return id.substr(0, id.find('-')); }

  // Pumps as the agent's loop does, while anything starts; checks what is then in flight.
  void PumpAll() {
    while (replayer_->Pump() > 0) {
    }
    const std::vector<std::string> held = sidecar_.held_ids();
    EXPECT_EQ(static_cast<int>(held.size()), replayer_->in_flight());
    EXPECT_LE(replayer_->in_flight(), options_.max_in_flight);
    std::set<std::string> lanes;
    for (const std::string& id : held) {
      EXPECT_TRUE(lanes.insert(LaneOf(id)).second) << "two attempts of lane " << LaneOf(id);
    }
    max_in_flight_seen_ = std::max(max_in_flight_seen_, replayer_->in_flight());
  }

  // Answers the oldest round still in flight (the attempts held first), its answers
  // delivered together as a SubmitBatch call's are; `fail` gets UNAVAILABLE.
  void AnswerOldestRound(const std::string& fail = "") {
    const std::vector<int> rounds = sidecar_.rounds();
    ASSERT_LT(rounds_answered_, rounds.size());
    const int size = rounds[rounds_answered_++];
    const std::vector<std::string> held = sidecar_.held_ids();
    CallbackBatch together;
    for (int i = 0; i < size; ++i) {
      if (held[i] == fail) {
        sidecar_.Release(Fail(absl::StatusCode::kUnavailable, "UPSTREAM_UNAVAILABLE", 0));
      } else {
        sidecar_.Release();
      }
    }
  }

  int max_in_flight_seen_ = 0;
  size_t rounds_answered_ = 0;
};

TEST_F(ReplayerOverlapTest, TheNextRoundGoesWhileOneIsInFlightAndEachLaneKeepsItsOrder) {
  // Ten lanes of three commands each: more due heads than max_in_flight.
  std::map<std::string, std::vector<std::string>> enqueued;
  for (int n = 0; n < 3; ++n) {
    for (int lane = 0; lane < 10; ++lane) {
      const std::string entity = absl::StrCat("L", lane);
      enqueued[entity].push_back(Enqueue(absl::StrCat(entity, "-", n), entity));
      clock_.AdvanceMs(1);
    }
  }
  PumpAll();
  EXPECT_EQ(sidecar_.rounds(), (std::vector<int>{3, 3, 2})) << "rounds up to max_in_flight";
  EXPECT_EQ(replayer_->in_flight(), 8) << "more than one round in flight at once";

  // The oldest round is answered (one of its heads fails, to be retried) while the later
  // ones are still in flight: the next round goes at once, beside them.
  const std::string failed = sidecar_.held_ids()[1];
  AnswerOldestRound(failed);
  EXPECT_EQ(StateOf(failed), v1::RETRYABLE_FAILED);
  PumpAll();
  EXPECT_EQ(sidecar_.rounds().size(), 4u);
  EXPECT_GT(replayer_->in_flight(), options_.max_round) << "the new round went beside the old";

  for (int step = 0; step < 100 && replayer_->in_flight() > 0; ++step) {
    AnswerOldestRound();
    // Past the failed head's backoff, and past the claims of the attempts still in flight:
    // their records look like a dead worker's, yet the replayer must not start a second
    // attempt of a lane it has in flight.
    clock_.AdvanceMs(60'000);
    PumpAll();
  }
  EXPECT_EQ(replayer_->in_flight(), 0);
  EXPECT_EQ(max_in_flight_seen_, options_.max_in_flight);
  for (const auto& [lane, ids] : enqueued) {
    for (const std::string& id : ids) EXPECT_EQ(StateOf(id), v1::ACKED) << id;
  }
  // Each lane's commands were sent in enqueue order; the failed head went again before the
  // command behind it.
  std::map<std::string, std::vector<std::string>> sent;
  for (const std::string& id : sidecar_.submitted()) {
    std::vector<std::string>& lane = sent[LaneOf(id)];
    if (lane.empty() || lane.back() != id) lane.push_back(id);
  }
  EXPECT_EQ(sent, enqueued);
  const std::vector<std::string> submitted = sidecar_.submitted();
  EXPECT_EQ(std::count(submitted.begin(), submitted.end(), failed), 2);
}

}  // namespace
}  // namespace eonce
