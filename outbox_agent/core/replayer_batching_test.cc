// The Replayer's rounds: the due lane heads one Pump claims go to the client together
// (SidecarClient::SubmitMany, which a batching client sends as SubmitBatch calls), at most
// max_round of them; a batch of answers wakes the loop once, with every slot it freed; and
// batching changes none of the rules: one attempt per entity, lane heads only, in enqueue
// order, and a record whose outcome is unknown reconciled before it is sent again.
#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/callback_batch.h"
#include "common/base/fault.h"
#include "outbox_agent/core/replayer_test_fixture.h"

namespace eonce {
namespace {

TEST_F(ReplayerTest, TheDueLaneHeadsOfARoundGoToTheClientTogether) {
  sidecar_.set_hold(true);
  for (int i = 0; i < 6; ++i) Enqueue(absl::StrCat("c", i), absl::StrCat("e", i));
  Enqueue("c0-next", "e0");  // behind its lane's head: not due
  ASSERT_EQ(replayer_->Pump(), 6);
  EXPECT_EQ(sidecar_.rounds(), (std::vector<int>{6})) << "one SubmitMany for the round";
  EXPECT_EQ(sidecar_.held_ids().size(), 6u);
  for (int i = 0; i < 6; ++i) sidecar_.Release();
  EXPECT_EQ(replayer_->in_flight(), 0);
}

TEST_F(ReplayerTest, ARoundTakesAtMostMaxRound) {
  replayer_.reset();
  options_.max_round = 4;
  replayer_ = std::make_unique<Replayer>(*store_, sidecar_, *credential_, clock_, random_,
                                         options_, &feed_);
  sidecar_.set_hold(true);
  for (int i = 0; i < 6; ++i) Enqueue(absl::StrCat("c", i), absl::StrCat("e", i));
  EXPECT_EQ(replayer_->Pump(), 4);
  EXPECT_EQ(replayer_->Pump(), 2);
  EXPECT_EQ(sidecar_.rounds(), (std::vector<int>{4, 2}));
  for (int i = 0; i < 6; ++i) sidecar_.Release();
  EXPECT_EQ(replayer_->in_flight(), 0);
}

// The answers of one SubmitBatch come back inside one CallbackBatch: the loop is woken
// once, after the last of them freed its slot, so its next Pump takes them all as one round
// (woken at the first, it would claim, sync and send a round of one).
TEST_F(ReplayerTest, ABatchOfAnswersWakesTheLoopOnceWithEverySlotFree) {
  replayer_.reset();
  std::vector<int> in_flight_at_wake;
  Replayer* raw = nullptr;
  auto replayer = std::make_unique<Replayer>(
      *store_, sidecar_, *credential_, clock_, random_, options_, &feed_, /*faults=*/nullptr,
      [&] { in_flight_at_wake.push_back(raw->in_flight()); });
  raw = replayer.get();
  sidecar_.set_hold(true);
  for (int i = 0; i < 5; ++i) Enqueue(absl::StrCat("c", i), absl::StrCat("e", i));
  ASSERT_EQ(replayer->Pump(), 5);
  {
    CallbackBatch together;
    for (int i = 0; i < 5; ++i) sidecar_.Release();
  }
  for (int i = 0; i < 5; ++i) EXPECT_EQ(StateOf(absl::StrCat("c", i)), v1::ACKED);
  EXPECT_EQ(in_flight_at_wake, (std::vector<int>{0})) << "one wake, once every slot is free";
}

// Rounds of several lanes at once, each round's answers delivered together: every round
// holds one attempt per entity, its lane's head, and each entity's commands are sent in
// enqueue order; a command whose outcome is unknown is reconciled before it is sent again,
// and the commands behind it wait until it is acked.
TEST_F(ReplayerTest, BatchedRoundsKeepEachEntitysOrderAndReconcileTheUnknown) {
  sidecar_.set_hold(true);
  const std::vector<std::string> entities = {"a", "b", "c"};
  std::map<std::string, std::vector<std::string>> enqueued;
  for (int n = 0; n < 4; ++n) {
    for (const std::string& e : entities) {
      enqueued[e].push_back(Enqueue(absl::StrCat(e, n), e));
    }
  }
  bool b0_failed = false;
  for (int round = 0; round < 12 && replayer_->in_flight() == 0; ++round) {
    if (replayer_->Pump() == 0) {
      clock_.AdvanceMs(60'000);  // past the unknown outcome's backoff
      continue;
    }
    std::vector<std::string> held = sidecar_.held_ids();
    std::map<std::string, int> per_entity;
    for (const std::string& id : held) {
      const std::string entity = id.substr(0, 1);
      EXPECT_EQ(++per_entity[entity], 1) << "two attempts of " << entity << " in one round";
    }
    CallbackBatch together;
    for (const std::string& id : held) {
      if (id == "b0" && !b0_failed) {
        b0_failed = true;
        sidecar_.Release(absl::DeadlineExceededError("scripted: outcome unknown"));
      } else {
        sidecar_.Release();
      }
    }
  }
  for (const auto& [e, ids] : enqueued) {
    for (const std::string& id : ids) EXPECT_EQ(StateOf(id), v1::ACKED) << id;
  }
  ASSERT_TRUE(b0_failed);
  EXPECT_EQ(sidecar_.reconciled(), (std::vector<std::string>{"b0"}));
  std::map<std::string, std::vector<std::string>> sent;
  for (const std::string& id : sidecar_.submitted()) {
    std::vector<std::string>& lane = sent[id.substr(0, 1)];
    if (lane.empty() || lane.back() != id) lane.push_back(id);  // b0's resend
  }
  EXPECT_EQ(sent, enqueued);
  const std::vector<std::string> submitted = sidecar_.submitted();
  EXPECT_EQ(std::count(submitted.begin(), submitted.end(), "b0"), 2);
  const auto last_b0 = std::find(submitted.rbegin(), submitted.rend(), "b0").base();
  EXPECT_EQ(std::find(submitted.begin(), last_b0, "b1"), last_b0) << "b1 went before b0's resend";
}

// Heads whose route has no known retention yet: `n` commands, one entity each ("s0",
// "s1", ...), to a method the fake sidecar has no retention for, `step_ms` apart.
void EnqueueStalledHeads(Outbox& outbox, FakeSidecarClient& sidecar, ManualClock& clock, int n,
                         int64_t step_ms) {
  const std::string stalled = "/eonce.case.v1.Cases/Open";
  sidecar.set_retention_unknown(stalled);
  for (int i = 0; i < n; ++i) {
    v1::Command c;
    c.set_command_id(absl::StrCat("s", i));
    c.set_target_method(stalled);
    c.set_request("req");
    c.mutable_entity()->set_type("case");
    c.mutable_entity()->set_id(absl::StrCat("s", i));
    ASSERT_TRUE(outbox.Enqueue(c).ok());
    clock.AdvanceMs(step_ms);
  }
}

// Heads whose route has no known retention are skipped but stay due; however many sort
// first, the heads of a healthy route behind them are still sent.
TEST_F(ReplayerTest, HeadsOfARouteWithoutRetentionDoNotStarveTheOthers) {
  replayer_.reset();
  options_.max_round = 2;
  replayer_ = std::make_unique<Replayer>(*store_, sidecar_, *credential_, clock_, random_,
                                         options_, &feed_);
  EnqueueStalledHeads(*outbox_, sidecar_, clock_, 40, /*step_ms=*/1);
  Enqueue("healthy", "e1");
  EXPECT_EQ(replayer_->Pump(), 1);
  EXPECT_EQ(StateOf("healthy"), v1::ACKED);
}

// More heads without a known retention than one page of the scan reads (kMaxDueScan,
// 4096), all sorting first: they step back in the due queue as they are read, so the scan
// reaches the healthy head behind them, and the loop is not left polling them.
TEST_F(ReplayerTest, MoreHeadsWithoutRetentionThanAScanReadsDoNotStarveTheOthers) {
  replayer_.reset();
  options_.max_in_flight = 128;
  options_.max_round = 64;
  replayer_ = std::make_unique<Replayer>(*store_, sidecar_, *credential_, clock_, random_,
                                         options_, &feed_);
  EnqueueStalledHeads(*outbox_, sidecar_, clock_, 4100, /*step_ms=*/0);
  clock_.AdvanceMs(1);
  Enqueue("healthy", "e1");
  EXPECT_EQ(replayer_->Pump(), 1);
  EXPECT_EQ(StateOf("healthy"), v1::ACKED);
  // What is left due is the stalled heads, a second from now, not at once.
  std::optional<int64_t> due = store_->NextDueMs();
  ASSERT_TRUE(due.has_value());
  EXPECT_GT(*due, clock_.NowMs());
  EXPECT_EQ(StateOf("s0"), v1::QUEUED);
}

TEST(ReplayerOptionsTest, ARoundIsOneToMaxInFlightAttempts) {
  ReplayerOptions options;
  EXPECT_TRUE(ValidateReplayerOptions(options).ok());
  options.max_round = 0;
  EXPECT_EQ(ValidateReplayerOptions(options).code(), absl::StatusCode::kInvalidArgument);
  options.max_round = options.max_in_flight + 1;
  EXPECT_EQ(ValidateReplayerOptions(options).code(), absl::StatusCode::kInvalidArgument);
  options.max_round = options.max_in_flight;
  EXPECT_TRUE(ValidateReplayerOptions(options).ok());
}

// Fails one fault point from its nth hit on: this process is going down there.
class CrashAt : public FaultInjector {
 public:
  CrashAt(FaultPoint point, int nth) : point_(point), nth_(nth) {}
  absl::Status Hit(FaultPoint point) override {
    if (point != point_ || ++hits_ < nth_) return absl::OkStatus();
    return absl::AbortedError("scripted crash");
  }

 private:
  const FaultPoint point_;
  const int nth_;
  int hits_ = 0;
};

// A crash amid a round sends nothing more: not even the round's attempts claimed before
// it, which a batching replayer holds back until the round is complete.
class ReplayerCrashTest : public ReplayerTest {
 protected:
  void CrashAmidARound(FaultPoint point) {
    CrashAt crash(point, 3);
    replayer_ = std::make_unique<Replayer>(*store_, sidecar_, *credential_, clock_, random_,
                                           options_, &feed_, &crash);
    for (int i = 0; i < 5; ++i) Enqueue(absl::StrCat("c", i), absl::StrCat("e", i));
    replayer_->Pump();
    EXPECT_EQ(sidecar_.submitted(), std::vector<std::string>{}) << "sent after the crash";
    EXPECT_EQ(replayer_->in_flight(), 0);
    replayer_.reset();
  }
};

TEST_F(ReplayerCrashTest, AfterClaim) { CrashAmidARound(FaultPoint::kAfterClaim); }
TEST_F(ReplayerCrashTest, BeforeNetworkSend) { CrashAmidARound(FaultPoint::kBeforeNetworkSend); }

}  // namespace
}  // namespace eonce
