// The replay loop's idle wait, read from a real outbox on a simulated clock: an empty
// outbox sleeps the longest wait, a retry that is not yet due sleeps until its due time,
// and what is due already but could not start is polled as the fixed timer did.
#include "outbox_agent/core/idle_wait.h"

#include "outbox_agent/core/replayer_test_fixture.h"

namespace eonce {
namespace {

constexpr IdleWaitOptions kIdle{/*stuck_poll_ms=*/20, /*max_wait_ms=*/1'000};

class IdleWaitTest : public ReplayerTest {
 protected:
  // The wait with the loop's periodic work far off, so that the outbox alone decides.
  int64_t Wait(const IdleWaitOptions& options = kIdle) {
    const int64_t now = clock_.NowMs();
    return IdleWaitMs(now, store_->NextDueMs(), now + 3'600'000, options);
  }
};

TEST_F(IdleWaitTest, AnEmptyOutboxSleepsTheLongestWait) {
  EXPECT_EQ(store_->NextDueMs(), std::nullopt);
  EXPECT_EQ(Wait(), 1'000);
  EXPECT_EQ(Wait({20, 600'000}), 600'000);
}

TEST_F(IdleWaitTest, AnIdleLoopSleepsUntilTheNextRetryIsDue) {
  sidecar_.AnswerSubmit(Fail(absl::StatusCode::kUnavailable, "UPSTREAM_UNAVAILABLE", 400));
  Enqueue("c1", "e1");
  ASSERT_EQ(replayer_->Pump(), 1);
  ASSERT_EQ(StateOf("c1"), v1::RETRYABLE_FAILED);
  const int64_t due = Get("c1").next_attempt_at_ms();
  ASSERT_GT(due, clock_.NowMs());
  ASSERT_LT(due - clock_.NowMs(), 600'000);
  EXPECT_EQ(Wait({20, 600'000}), due - clock_.NowMs()) << "the wait is the time to the retry";
  clock_.AdvanceMs(100);
  EXPECT_EQ(Wait({20, 600'000}), due - clock_.NowMs());
  EXPECT_EQ(Wait({20, 10}), 10) << "never past the longest wait";
  clock_.SetMs(due);
  EXPECT_EQ(replayer_->Pump(), 1) << "the retry goes once its time came";
  EXPECT_EQ(StateOf("c1"), v1::ACKED);
  EXPECT_EQ(Wait(), 1'000);
}

TEST_F(IdleWaitTest, WhatIsDueButCannotStartIsPolledAndPeriodicWorkIsNotMissed) {
  ASSERT_TRUE(credential_->Set(1, true).ok());  // revoked: nothing starts
  Enqueue("c1", "e1");
  EXPECT_EQ(replayer_->Pump(), 0);
  EXPECT_EQ(Wait(), 20);
  const int64_t now = clock_.NowMs();
  EXPECT_EQ(IdleWaitMs(now, std::nullopt, now + 250, kIdle), 250) << "the periodic work";
  EXPECT_EQ(IdleWaitMs(now, std::nullopt, now - 5, kIdle), 0) << "overdue periodic work";
}

TEST(IdleWaitOptionsTest, AWaitThatIsNotPositiveIsRefused) {
  EXPECT_TRUE(ValidateIdleWait(kIdle).ok());
  EXPECT_EQ(ValidateIdleWait({20, 0}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateIdleWait({0, 1'000}).code(), absl::StatusCode::kInvalidArgument);
}

TEST(PeriodicWorkTest, DueEveryIntervalAndAtOnceWhenTheClockWentBack) {
  EXPECT_FALSE(PeriodicWorkDue(1'500, 1'000, 1'000));
  EXPECT_TRUE(PeriodicWorkDue(2'000, 1'000, 1'000));
  EXPECT_TRUE(PeriodicWorkDue(0, 0, 0));
  // The wall clock stepped back an hour: the probe and the credential file are not left
  // for an hour.
  EXPECT_TRUE(PeriodicWorkDue(1'000, 3'600'000, 1'000));
}

}  // namespace
}  // namespace eonce
