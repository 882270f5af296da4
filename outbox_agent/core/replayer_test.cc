// The replay engine's state machine with a simulated clock, a seeded random source, a real
// RocksDB outbox and a scripted sidecar.
#include "outbox_agent/core/replayer.h"

#include "common/base/callback_batch.h"
#include "outbox_agent/core/attempt_log.h"
#include "outbox_agent/core/replayer_test_fixture.h"

namespace eonce {
namespace {

TEST_F(ReplayerTest, QueuedClaimedSendingAcked) {
  Enqueue("c1", "a");
  EXPECT_EQ(replayer_->Pump(), 1);
  OutboxRecord r = Get("c1");
  EXPECT_EQ(r.state(), v1::ACKED);
  EXPECT_EQ(r.result().response(), "ok:c1");
  EXPECT_EQ(r.attempt(), 1u);
  std::vector<OutboxState> path;
  for (const auto& t : r.history()) path.push_back(t.to());
  // Claimed and marked SENDING in one write: nothing to reconcile first.
  EXPECT_EQ(path, (std::vector<OutboxState>{v1::QUEUED, v1::SENDING, v1::ACKED}));
  EXPECT_TRUE(r.ever_sent());
  EXPECT_EQ(replayer_->in_flight(), 0);
  EXPECT_EQ(replayer_->Pump(), 0);
}

TEST_F(ReplayerTest, SameEntityInEnqueueOrderOtherEntitiesInParallel) {
  sidecar_.set_hold(true);
  Enqueue("a1", "a");
  Enqueue("a2", "a");
  Enqueue("b1", "b");
  EXPECT_EQ(replayer_->Pump(), 2);
  EXPECT_EQ(sidecar_.held_ids(), (std::vector<std::string>{"a1", "b1"}));
  EXPECT_EQ(replayer_->Pump(), 0);  // a2 waits for a1
  sidecar_.Release();               // a1 acked
  EXPECT_EQ(replayer_->Pump(), 1);
  EXPECT_EQ(sidecar_.held_ids(), (std::vector<std::string>{"b1", "a2"}));
  sidecar_.Release();
  sidecar_.Release();
  EXPECT_EQ(StateOf("a2"), v1::ACKED);
  EXPECT_EQ(sidecar_.submitted(), (std::vector<std::string>{"a1", "b1", "a2"}));
}

TEST_F(ReplayerTest, AFailingEntityBlocksOnlyItsOwnLane) {
  sidecar_.set_failing_entity("a");
  Enqueue("a1", "a");
  Enqueue("a2", "a");
  Enqueue("b1", "b");
  Enqueue("b2", "b");
  for (int round = 0; round < 5; ++round) {
    replayer_->Pump();
    clock_.AdvanceMs(options_.retry.max_backoff_ms);
  }
  EXPECT_EQ(StateOf("b1"), v1::ACKED);
  EXPECT_EQ(StateOf("b2"), v1::ACKED);
  EXPECT_EQ(StateOf("a1"), v1::RETRYABLE_FAILED);
  EXPECT_EQ(StateOf("a2"), v1::QUEUED);
  for (const std::string& id : sidecar_.submitted()) EXPECT_NE(id, "a2");
}

TEST_F(ReplayerTest, RetryableAnswerWaitsAtLeastTheServerDelay) {
  Enqueue("c1", "a");
  sidecar_.AnswerSubmit(Fail(absl::StatusCode::kUnavailable, "IN_PROGRESS", 5'000));
  replayer_->Pump();
  OutboxRecord r = Get("c1");
  EXPECT_EQ(r.state(), v1::RETRYABLE_FAILED);
  EXPECT_EQ(r.last_error().reason(), "IN_PROGRESS");
  EXPECT_GE(r.next_attempt_at_ms(), clock_.NowMs() + 5'000);
  clock_.AdvanceMs(4'999);
  EXPECT_EQ(replayer_->Pump(), 0);
  clock_.AdvanceMs(options_.retry.max_backoff_ms);
  EXPECT_EQ(replayer_->Pump(), 1);
  EXPECT_EQ(StateOf("c1"), v1::ACKED);
  EXPECT_EQ(sidecar_.submitted().size(), 2u);
}

// Each answer is kept in the record's attempt log with the backoff it set, oldest first,
// and the log keeps only the last kAttemptLogLimit.
TEST_F(ReplayerTest, AttemptLogKeepsEachAnswerAndItsBackoffBounded) {
  options_.retry.max_attempts = 40;
  replayer_ = std::make_unique<Replayer>(*store_, sidecar_, *credential_, clock_, random_,
                                         options_, &feed_);
  Enqueue("c1", "a");
  const int retries = kAttemptLogLimit + 3;
  for (int i = 0; i < retries; ++i) {
    sidecar_.AnswerSubmit(Fail(absl::StatusCode::kUnavailable, "IN_PROGRESS", 5'000));
    ASSERT_EQ(replayer_->Pump(), 1) << i;
    clock_.AdvanceMs(options_.retry.max_backoff_ms + 5'000);
  }
  replayer_->Pump();
  OutboxRecord r = Get("c1");
  ASSERT_EQ(r.state(), v1::ACKED);
  ASSERT_EQ(r.attempts_size(), kAttemptLogLimit);
  const v1::AttemptRecord& retried = r.attempts(0);
  EXPECT_EQ(retried.attempt(), static_cast<uint32_t>(retries + 1 - kAttemptLogLimit + 1));
  EXPECT_EQ(retried.code(), static_cast<int>(absl::StatusCode::kUnavailable));
  EXPECT_EQ(retried.reason(), "IN_PROGRESS");
  EXPECT_EQ(retried.state(), v1::RETRYABLE_FAILED);
  EXPECT_GE(retried.backoff_ms(), 5'000);
  const v1::AttemptRecord& last = r.attempts(kAttemptLogLimit - 1);
  EXPECT_EQ(last.attempt(), static_cast<uint32_t>(retries + 1));
  EXPECT_EQ(last.code(), 0);
  EXPECT_EQ(last.reason(), "APPLIED");
  EXPECT_EQ(last.state(), v1::ACKED);
  EXPECT_EQ(last.backoff_ms(), 0);
}

TEST_F(ReplayerTest, UnknownOutcomeReconcilesBeforeSending) {
  Enqueue("c1", "a");
  sidecar_.AnswerSubmit(Fail(absl::StatusCode::kDeadlineExceeded, nullptr));
  replayer_->Pump();
  EXPECT_EQ(StateOf("c1"), v1::UNKNOWN);
  v1::ReconcileResponse committed;
  committed.set_state(v1::RECORD_COMMITTED);
  committed.set_command_id("c1");
  committed.mutable_result()->set_response("applied on the first try");
  sidecar_.AnswerReconcile(committed);
  clock_.AdvanceMs(options_.retry.max_backoff_ms);
  replayer_->Pump();
  OutboxRecord r = Get("c1");
  EXPECT_EQ(r.state(), v1::ACKED);
  EXPECT_EQ(r.result().response(), "applied on the first try");
  EXPECT_EQ(sidecar_.submitted().size(), 1u);  // no second send
  EXPECT_EQ(sidecar_.reconciled(), std::vector<std::string>{"c1"});
}

// A record reconciled and found never seen is sent again: its move from CLAIMED to SENDING
// is announced like any other, so a watcher of SENDING alone hears of it.
TEST_F(ReplayerTest, ASendAfterAReconcileIsAnnouncedToItsWatchers) {
  Enqueue("c1", "a");
  sidecar_.AnswerSubmit(Fail(absl::StatusCode::kDeadlineExceeded, nullptr));
  replayer_->Pump();
  ASSERT_EQ(StateOf("c1"), v1::UNKNOWN);
  std::shared_ptr<StateFeed::Subscription> sending =
      feed_.Subscribe(nullptr, StateFeed::BitOf(v1::SENDING));
  clock_.AdvanceMs(options_.retry.max_backoff_ms);
  replayer_->Pump();  // reconciled (not seen), then sent again
  ASSERT_EQ(sidecar_.reconciled(), std::vector<std::string>{"c1"});
  ASSERT_EQ(sidecar_.submitted().size(), 2u);
  v1::WatchEvent event;
  ASSERT_TRUE(sending->Next(&event, 0)) << "the send after the reconcile was not announced";
  EXPECT_EQ(event.command_id(), "c1");
  EXPECT_EQ(event.state(), v1::SENDING);
  feed_.Unsubscribe(sending);
}

// A producer-supplied key that another command already used: the record the sidecar holds
// under that key is not this command's outcome, so reconciling to it is a conflict.
TEST_F(ReplayerTest, ReconcileToAnotherCommandsRecordIsAConflictNotAnAck) {
  v1::Command c;
  c.set_command_id("mine");
  c.set_idempotency_key("invoice-42");
  c.set_target_method("/eonce.ledger.v1.Ledger/Transfer");
  c.set_request("pay 10");
  c.mutable_entity()->set_type("account");
  c.mutable_entity()->set_id("a");
  ASSERT_TRUE(outbox_->Enqueue(c).ok());
  sidecar_.AnswerSubmit(Fail(absl::StatusCode::kDeadlineExceeded, nullptr));
  replayer_->Pump();
  ASSERT_EQ(StateOf("mine"), v1::UNKNOWN);

  // A sidecar that does not check the owner answers with what the key holds.
  v1::ReconcileResponse theirs;
  theirs.set_state(v1::RECORD_COMMITTED);
  theirs.set_command_id("theirs");
  theirs.set_idempotency_key("invoice-42");
  theirs.mutable_result()->set_response("their answer");
  sidecar_.AnswerReconcile(theirs);
  clock_.AdvanceMs(options_.retry.max_backoff_ms);
  replayer_->Pump();
  OutboxRecord r = Get("mine");
  EXPECT_EQ(r.state(), v1::CONFLICT);
  EXPECT_EQ(r.last_error().reason(), "KEY_REUSED");
  EXPECT_EQ(r.result().response(), "");

  // The request carried the command and its payload for the sidecar to check.
  ASSERT_EQ(sidecar_.reconcile_requests().size(), 1u);
  EXPECT_EQ(sidecar_.reconcile_requests()[0].expect_command_id(), "mine");
  EXPECT_EQ(sidecar_.reconcile_requests()[0].expect_payload_sha256(),
            r.command().payload_hash().sha256());
}

TEST_F(ReplayerTest, ReconcileToAnotherPayloadIsAConflict) {
  Enqueue("c1", "a");
  sidecar_.AnswerSubmit(Fail(absl::StatusCode::kDeadlineExceeded, nullptr));
  replayer_->Pump();
  v1::ReconcileResponse other;
  other.set_state(v1::RECORD_FAILED);
  other.set_command_id("c1");
  other.set_payload_sha256(std::string(32, 'x'));
  sidecar_.AnswerReconcile(other);
  clock_.AdvanceMs(options_.retry.max_backoff_ms);
  replayer_->Pump();
  EXPECT_EQ(StateOf("c1"), v1::CONFLICT);
  EXPECT_EQ(Get("c1").last_error().reason(), "IDEMPOTENCY_CONFLICT");
}

TEST_F(ReplayerTest, UnknownOutcomeNotSeenIsSentAgain) {
  Enqueue("c1", "a");
  sidecar_.AnswerSubmit(Fail(absl::StatusCode::kUnavailable, nullptr));  // connection lost
  replayer_->Pump();
  EXPECT_EQ(StateOf("c1"), v1::UNKNOWN);
  clock_.AdvanceMs(options_.retry.max_backoff_ms);
  replayer_->Pump();
  EXPECT_EQ(StateOf("c1"), v1::ACKED);
  EXPECT_EQ(sidecar_.reconciled().size(), 1u);
  EXPECT_EQ(sidecar_.submitted().size(), 2u);
}

TEST_F(ReplayerTest, TerminalAnswers) {
  Enqueue("a-conflict", "a");
  Enqueue("b-invalid", "b");
  Enqueue("c-business", "c");
  Enqueue("d-expired", "d");
  Enqueue("e-parked", "e");
  sidecar_.AnswerSubmit(Fail(absl::StatusCode::kAlreadyExists, "IDEMPOTENCY_CONFLICT"));
  sidecar_.AnswerSubmit(Fail(absl::StatusCode::kInvalidArgument, "INVALID_FIELD"));
  v1::SubmitResponse rejected = FakeSidecarClient::Applied(credential_->session(), "c-business", "");
  rejected.mutable_result()->set_code(9);
  v1::Rejection why;
  why.set_reason("INSUFFICIENT_FUNDS");
  rejected.mutable_result()->set_error_details(why.SerializeAsString());
  sidecar_.AnswerSubmit(rejected);
  sidecar_.AnswerSubmit(Fail(absl::StatusCode::kFailedPrecondition, "RECORD_EXPIRED"));
  sidecar_.AnswerSubmit(Fail(absl::StatusCode::kFailedPrecondition, "OUTCOME_UNKNOWN"));
  EXPECT_EQ(replayer_->Pump(), 5);
  EXPECT_EQ(StateOf("a-conflict"), v1::CONFLICT);
  EXPECT_EQ(StateOf("b-invalid"), v1::REJECTED);
  EXPECT_EQ(StateOf("c-business"), v1::REJECTED);
  EXPECT_EQ(Get("c-business").last_error().reason(), "INSUFFICIENT_FUNDS");
  EXPECT_EQ(StateOf("d-expired"), v1::EXPIRED);
  OutboxRecord parked = Get("e-parked");
  EXPECT_EQ(parked.state(), v1::UNKNOWN);
  EXPECT_EQ(parked.next_attempt_at_ms(), clock_.NowMs() + options_.retry.parked_recheck_ms);
}

TEST_F(ReplayerTest, UnauthenticatedPausesAllReplayUntilRenewed) {
  Enqueue("c1", "a");
  Enqueue("c2", "b");
  sidecar_.AnswerSubmit(Fail(absl::StatusCode::kUnauthenticated, "NO_IDENTITY"));
  sidecar_.set_hold(false);
  replayer_->Pump();
  EXPECT_TRUE(credential_->paused());
  clock_.AdvanceMs(60'000);
  EXPECT_EQ(replayer_->Pump(), 0);
  ASSERT_TRUE(credential_->Set(2, false).ok());
  replayer_->Pump();
  EXPECT_EQ(StateOf("c1"), v1::ACKED);
  EXPECT_EQ(StateOf("c2"), v1::ACKED);
}

TEST_F(ReplayerTest, PoisonIsDeadLetteredAndBlocksItsLaneUntilRequeued) {
  Enqueue("poison", "a");
  Enqueue("next", "a");
  for (int i = 0; i < 3; ++i) {
    sidecar_.AnswerSubmit(Fail(absl::StatusCode::kInternal, nullptr));
    replayer_->Pump();
    clock_.AdvanceMs(options_.retry.max_backoff_ms);
  }
  OutboxRecord dead = Get("poison");
  EXPECT_EQ(dead.state(), v1::DEAD_LETTERED);
  EXPECT_EQ(dead.last_error().code(), static_cast<int>(absl::StatusCode::kInternal));
  EXPECT_EQ(replayer_->Pump(), 0);
  EXPECT_EQ(StateOf("next"), v1::QUEUED);
  ASSERT_TRUE(outbox_->Requeue("poison").ok());
  replayer_->Pump();
  EXPECT_EQ(StateOf("poison"), v1::ACKED);
  replayer_->Pump();
  EXPECT_EQ(StateOf("next"), v1::ACKED);
}

TEST_F(ReplayerTest, OutOfAttemptsIsDeadLettered) {
  Enqueue("c1", "a");
  for (int i = 0; i < options_.retry.max_attempts; ++i) {
    sidecar_.AnswerSubmit(Fail(absl::StatusCode::kUnavailable, "IN_PROGRESS"));
    replayer_->Pump();
    clock_.AdvanceMs(options_.retry.max_backoff_ms);
  }
  replayer_->Pump();
  EXPECT_EQ(StateOf("c1"), v1::DEAD_LETTERED);
  EXPECT_EQ(sidecar_.submitted().size(), static_cast<size_t>(options_.retry.max_attempts));
}

TEST_F(ReplayerTest, NeverSendsPastTheSidecarRetention) {
  sidecar_.set_retention_ms(120'000);  // retention minus margin: 60 s
  Enqueue("old", "a");
  sidecar_.AnswerSubmit(Fail(absl::StatusCode::kUnavailable, "UPSTREAM_UNAVAILABLE", 61'000));
  replayer_->Pump();
  clock_.AdvanceMs(61'000);
  replayer_->Pump();
  EXPECT_EQ(StateOf("old"), v1::EXPIRED);
  EXPECT_EQ(sidecar_.submitted().size(), 1u);
}

// A command sent with an unknown outcome that then ages past the retention may or may not
// have happened: later commands of its entity wait for an operator, as behind a dead
// letter. One that was never sent is known not to have happened and lets them go.
TEST_F(ReplayerTest, ExpiredUnknownBlocksItsLaneButExpiredUnsentDoesNot) {
  sidecar_.set_retention_ms(120'000);  // retention minus margin: 60 s
  Enqueue("unknown", "a");
  Enqueue("after-unknown", "a");
  sidecar_.AnswerSubmit(Fail(absl::StatusCode::kDeadlineExceeded, nullptr));
  replayer_->Pump();
  ASSERT_EQ(StateOf("unknown"), v1::UNKNOWN);
  sidecar_.set_hold(true);  // the sidecar goes quiet; no answer comes back
  clock_.AdvanceMs(61'000);
  replayer_->Pump();
  EXPECT_EQ(StateOf("unknown"), v1::EXPIRED);
  clock_.AdvanceMs(options_.retry.max_backoff_ms);
  EXPECT_EQ(replayer_->Pump(), 0);
  EXPECT_EQ(StateOf("after-unknown"), v1::QUEUED);
  EXPECT_EQ(sidecar_.submitted(), std::vector<std::string>{"unknown"});

  // The operator decides; dropping it releases the lane.
  ASSERT_TRUE(outbox_->Drop("unknown", "checked: not applied").ok());
  sidecar_.set_hold(false);
  EXPECT_EQ(replayer_->Pump(), 0);  // the next head is past retention too, never sent
  EXPECT_EQ(StateOf("after-unknown"), v1::EXPIRED);

  Enqueue("unsent", "b");
  Enqueue("after-unsent", "b");
  clock_.AdvanceMs(61'000);
  replayer_->Pump();
  EXPECT_EQ(StateOf("unsent"), v1::EXPIRED);
  replayer_->Pump();
  EXPECT_EQ(StateOf("after-unsent"), v1::EXPIRED);  // released, then too old itself
  EXPECT_EQ(sidecar_.submitted(), std::vector<std::string>{"unknown"});
}

// Nothing is sent until the retention is known; a head skipped for it is looked at again
// a second later (it steps back in the due queue meanwhile, so that it cannot crowd out
// the heads of other routes).
TEST_F(ReplayerTest, NothingIsSentUntilTheRetentionIsKnown) {
  sidecar_.set_retention_ms(std::nullopt);
  Enqueue("c1", "a");
  EXPECT_EQ(replayer_->Pump(), 0);
  sidecar_.set_retention_ms(7LL * 24 * 3600 * 1000);
  EXPECT_EQ(replayer_->Pump(), 0);
  clock_.AdvanceMs(1'000);
  EXPECT_EQ(replayer_->Pump(), 1);
}

TEST_F(ReplayerTest, ExpiredClaimIsTakenOverAndTheStaleWorkerIsRefused) {
  sidecar_.set_hold(true);
  Enqueue("c1", "a");
  ASSERT_EQ(replayer_->Pump(), 1);  // worker 1 sends and hangs
  clock_.AdvanceMs(options_.claim_ttl_ms);
  // A second replayer (another worker) takes the expired claim over.
  Replayer other(*store_, sidecar_, *credential_, clock_, random_, options_);
  ASSERT_EQ(other.Pump(), 1);
  EXPECT_EQ(sidecar_.reconciled(), std::vector<std::string>{"c1"});  // unknown: reconcile
  ASSERT_EQ(sidecar_.held_ids().size(), 2u);
  sidecar_.Release();  // worker 1's late answer
  EXPECT_EQ(replayer_->stats().stale_claims_refused.load(), 1);
  EXPECT_EQ(StateOf("c1"), v1::SENDING);
  sidecar_.Release();
  EXPECT_EQ(StateOf("c1"), v1::ACKED);
}

// The answers of one SubmitBatch call come back to back on one thread: their moves are
// written together when the batch of callbacks closes, and a worker whose claim was taken
// over meanwhile still writes nothing.
TEST_F(ReplayerTest, AnswersDeliveredTogetherMoveTogetherAndAStaleClaimStillWritesNothing) {
  sidecar_.set_hold(true);
  for (const char* id : {"c1", "c2", "c3"}) Enqueue(id, id);
  ASSERT_EQ(replayer_->Pump(), 3);
  // Another worker took c2 over (its claim, with another token).
  ASSERT_TRUE(store_->Mutate("c2", "taken over", [](OutboxRecord* r) {
                       r->mutable_claim()->set_token(42);
                       return absl::OkStatus();
                     }, false).ok());
  {
    CallbackBatch together;
    for (int i = 0; i < 3; ++i) sidecar_.Release();
    EXPECT_EQ(StateOf("c1"), v1::SENDING) << "moved before the batch closed";
    EXPECT_EQ(replayer_->in_flight(), 3);
  }
  EXPECT_EQ(StateOf("c1"), v1::ACKED);
  EXPECT_EQ(StateOf("c3"), v1::ACKED);
  EXPECT_EQ(StateOf("c2"), v1::SENDING);
  EXPECT_EQ(Get("c2").claim().token(), 42u);
  EXPECT_EQ(replayer_->stats().stale_claims_refused.load(), 1);
  EXPECT_EQ(replayer_->in_flight(), 0);
}

TEST_F(ReplayerTest, RevocationStopsReplayAndFencesAnswersInFlight) {
  sidecar_.set_hold(true);
  Enqueue("c1", "a");
  Enqueue("c2", "b");
  ASSERT_EQ(replayer_->Pump(), 2);
  ASSERT_TRUE(credential_->Set(1, /*revoked=*/true).ok());
  sidecar_.Release();  // an answer for the old session arrives after the revocation
  EXPECT_EQ(replayer_->stats().stale_responses_refused.load(), 1);
  EXPECT_EQ(StateOf("c1"), v1::RETRYABLE_FAILED);
  EXPECT_EQ(Get("c1").last_error().reason(), "STALE_RESPONSE");
  clock_.AdvanceMs(60'000);
  EXPECT_EQ(replayer_->Pump(), 0);  // stopped at once
  // The records stay durable for the next authorized session.
  ASSERT_TRUE(credential_->Set(2, false).ok());
  sidecar_.set_hold(false);
  sidecar_.Release();  // c2's old answer: also fenced (epoch moved on)
  EXPECT_EQ(replayer_->stats().stale_responses_refused.load(), 2);
  clock_.AdvanceMs(options_.retry.max_backoff_ms);
  replayer_->Pump();
  EXPECT_EQ(StateOf("c1"), v1::ACKED);
  EXPECT_EQ(StateOf("c2"), v1::ACKED);
}

TEST_F(ReplayerTest, RestartReconcilesWhatWasInFlight) {
  sidecar_.set_hold(true);
  Enqueue("c1", "a");
  ASSERT_EQ(replayer_->Pump(), 1);
  EXPECT_EQ(StateOf("c1"), v1::SENDING);
  sidecar_.Release(Fail(absl::StatusCode::kCancelled, nullptr));  // the process dies
  // The answer's transition was never written; another command's synced Enqueue made
  // SENDING durable; then the crash.
  Enqueue("c2", "b");
  Open();
  EXPECT_EQ(StateOf("c1"), v1::UNKNOWN);
  sidecar_.set_hold(false);
  v1::ReconcileResponse committed;
  committed.set_state(v1::RECORD_COMMITTED);
  committed.set_command_id("c1");
  committed.mutable_result()->set_response("it was applied");
  sidecar_.AnswerReconcile(committed);
  clock_.AdvanceMs(options_.retry.max_backoff_ms);
  replayer_->Pump();
  EXPECT_EQ(StateOf("c1"), v1::ACKED);
  EXPECT_EQ(Get("c1").result().response(), "it was applied");
  // Claimed to reconcile, and answered by the reconcile: CLAIMED, never SENDING again.
  const OutboxRecord record = Get("c1");
  std::vector<OutboxState> path;
  for (const auto& t : record.history()) path.push_back(t.to());
  EXPECT_EQ(path, (std::vector<OutboxState>{v1::QUEUED, v1::SENDING, v1::UNKNOWN, v1::CLAIMED,
                                            v1::ACKED}));
}

// A long payload is kept apart from the record while it may be sent: every attempt still
// carries it, the first, a retry, one after a reconcile and one after a restart.
TEST_F(ReplayerTest, EveryAttemptCarriesTheEnqueuedPayload) {
  const std::string payload = "req-c1" + std::string(2000, 'p');
  Enqueue("c1", "a", payload);
  sidecar_.AnswerSubmit(Fail(absl::StatusCode::kUnavailable, "UPSTREAM_UNAVAILABLE", 0));
  sidecar_.AnswerSubmit(Fail(absl::StatusCode::kDeadlineExceeded, nullptr));
  replayer_->Pump();
  EXPECT_EQ(StateOf("c1"), v1::RETRYABLE_FAILED);
  clock_.AdvanceMs(options_.retry.max_backoff_ms);
  replayer_->Pump();
  EXPECT_EQ(StateOf("c1"), v1::UNKNOWN);
  Enqueue("c2", "b");  // synced: UNKNOWN is durable too
  Open();
  clock_.AdvanceMs(options_.retry.max_backoff_ms);
  replayer_->Pump();  // c1 reconciled (not seen), then sent again; c2 sent
  EXPECT_EQ(StateOf("c1"), v1::ACKED);
  EXPECT_EQ(sidecar_.reconciled(), std::vector<std::string>{"c1"});
  std::vector<std::string> sent_c1;
  const std::vector<std::string> ids = sidecar_.submitted();
  const std::vector<std::string> requests = sidecar_.submitted_requests();
  ASSERT_EQ(ids.size(), requests.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(requests[i], ids[i] == "c1" ? payload : "req-" + ids[i]);
    if (ids[i] == "c1") sent_c1.push_back(requests[i]);
  }
  EXPECT_EQ(sent_c1.size(), 3u);
  // Final, it carries its payload again (retention drops both together).
  EXPECT_EQ(Get("c1").command().request(), payload);
  EXPECT_EQ((*store_->GetState("c1"))->command().request(), payload);
}

TEST_F(ReplayerTest, EnqueueRules) {
  v1::Command c;
  c.set_target_method("/eonce.ledger.v1.Ledger/Transfer");
  c.set_request("x");
  c.mutable_entity()->set_type("account");
  c.mutable_entity()->set_id("a");
  auto created = outbox_->Enqueue(c);
  ASSERT_TRUE(created.ok());
  EXPECT_TRUE(created->created());
  const v1::Command& stored = created->record().command();
  EXPECT_EQ(stored.command_id().size(), 32u);  // created at acceptance
  EXPECT_EQ(stored.idempotency_key(), "Transfer:account/a:" + stored.command_id());
  EXPECT_EQ(stored.tenant(), "acme");
  EXPECT_EQ(stored.credential_epoch(), 1);
  EXPECT_EQ(stored.payload_hash().sha256().size(), 32u);
  c.set_command_id(stored.command_id());
  auto again = outbox_->Enqueue(c);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->created());
  c.set_request("different");
  EXPECT_EQ(outbox_->Enqueue(c).status().code(), absl::StatusCode::kAlreadyExists);
  c.set_tenant("globex");
  EXPECT_EQ(outbox_->Enqueue(c).status().code(), absl::StatusCode::kPermissionDenied);
  v1::Command bad;
  EXPECT_EQ(outbox_->Enqueue(bad).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace eonce
