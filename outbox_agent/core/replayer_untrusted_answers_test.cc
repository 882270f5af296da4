// Answers the Replayer must not take at their word: a batch whose answers do not match its
// commands (their count, or the command an answer is fenced for) leaves each outcome
// unknown, reconciled before anything is resent and never dead-lettered; a failure
// answered under a credential since replaced neither pauses replay nor ends the record.
#include <string>

#include "common/base/status.h"
#include "outbox_agent/core/replayer_test_fixture.h"

namespace eonce {
namespace {

absl::Status BatchMismatch() {
  return Error(absl::StatusCode::kInternal, "BATCH_MISMATCH",
               "the sidecar answered 1 of 2 calls; their outcome is unknown");
}

TEST_F(ReplayerTest, ABatchMismatchIsReconciledAndNeverDeadLettered) {
  Enqueue("c1", "e1");
  // More mismatches than max_unclassified (3): an unclassified failure would dead-letter.
  for (int i = 0; i < 5; ++i) sidecar_.AnswerSubmit(BatchMismatch());
  sidecar_.AnswerReconcile(absl::UnavailableError("scripted: the sidecar is unreachable"));
  ASSERT_EQ(replayer_->Pump(), 1);
  EXPECT_EQ(StateOf("c1"), v1::UNKNOWN);
  for (int i = 0; i < 10 && StateOf("c1") != v1::ACKED; ++i) {
    clock_.AdvanceMs(120'000);
    replayer_->Pump();
    EXPECT_NE(StateOf("c1"), v1::DEAD_LETTERED);
  }
  EXPECT_EQ(StateOf("c1"), v1::ACKED);
  ASSERT_FALSE(sidecar_.reconciled().empty()) << "resent without reconciling";
  EXPECT_EQ(sidecar_.reconciled().front(), "c1");
}

TEST_F(ReplayerTest, AnAnswerFencedForAnotherCommandLeavesTheOutcomeUnknown) {
  Enqueue("c1", "e1");
  sidecar_.AnswerSubmit(FakeSidecarClient::Applied(credential_->session(), "c2", "ok:c2"));
  ASSERT_EQ(replayer_->Pump(), 1);
  EXPECT_EQ(StateOf("c1"), v1::UNKNOWN) << "another command's answer taken as c1's";
  EXPECT_EQ(Get("c1").last_error().reason(), "ANSWER_MISMATCH");
}

TEST_F(ReplayerTest, UnauthenticatedUnderAReplacedCredentialDoesNotPause) {
  sidecar_.set_hold(true);
  Enqueue("c1", "e1");
  ASSERT_EQ(replayer_->Pump(), 1);
  ASSERT_TRUE(credential_->Set(2, false).ok());
  sidecar_.Release(Fail(absl::StatusCode::kUnauthenticated, "NO_IDENTITY"));
  EXPECT_FALSE(credential_->paused()) << "paused by an answer to the old credential";
  EXPECT_EQ(StateOf("c1"), v1::RETRYABLE_FAILED);
  sidecar_.set_hold(false);
  EXPECT_EQ(replayer_->Pump(), 1);
  EXPECT_EQ(StateOf("c1"), v1::ACKED);
}

TEST_F(ReplayerTest, PermissionDeniedUnderAReplacedCredentialIsNotFinal) {
  sidecar_.set_hold(true);
  Enqueue("c1", "e1");
  ASSERT_EQ(replayer_->Pump(), 1);
  ASSERT_TRUE(credential_->Set(2, false).ok());
  sidecar_.Release(Fail(absl::StatusCode::kPermissionDenied, "CREDENTIAL_REVOKED"));
  EXPECT_EQ(StateOf("c1"), v1::RETRYABLE_FAILED) << "rejected for the old credential";
  sidecar_.set_hold(false);
  EXPECT_EQ(replayer_->Pump(), 1);
  EXPECT_EQ(StateOf("c1"), v1::ACKED);
}

// Under the current credential the same answers keep their meaning.
TEST_F(ReplayerTest, PermissionDeniedUnderTheCurrentCredentialIsStillFinal) {
  Enqueue("c1", "e1");
  sidecar_.AnswerSubmit(Fail(absl::StatusCode::kPermissionDenied, "CREDENTIAL_REVOKED"));
  ASSERT_EQ(replayer_->Pump(), 1);
  EXPECT_EQ(StateOf("c1"), v1::REJECTED);
}

}  // namespace
}  // namespace eonce
