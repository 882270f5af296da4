// Every branch of the receiver contract, against a real RocksDB and a scripted upstream.
#include <thread>
#include <vector>

#include "dedupe_sidecar/core/deduper_test_fixture.h"

namespace eonce {
namespace {

TEST_F(DeduperTest, FirstSeenIsForwardedOnceWithIdentityAndStored) {
  v1::Command c = Cmd("c1");
  upstream_.set_next_reply(FakeUpstream::Ok("balance 90"));
  auto r = Submit(c);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->disposition(), v1::APPLIED);
  EXPECT_EQ(r->result().response(), "balance 90");
  EXPECT_FALSE(r->replay().replayed());
  EXPECT_EQ(r->fence().tenant(), "acme");
  EXPECT_EQ(r->fence().credential_epoch(), 3);
  EXPECT_EQ(r->fence().command_id(), "c1");
  ASSERT_EQ(upstream_.forwards(), 1u);
  ForwardCall call = upstream_.call(0);
  EXPECT_EQ(call.method, c.target_method());
  EXPECT_EQ(call.request, c.request());
  EXPECT_EQ(call.command_id, "c1");
  EXPECT_EQ(call.tenant, "acme");
  EXPECT_EQ(call.actor, "alice");
  EXPECT_EQ(call.idempotency_key, c.idempotency_key());
  EXPECT_EQ(call.fencing_token, 1u);
  EXPECT_EQ(StateOf(c.idempotency_key()), v1::RECORD_COMMITTED);
  EXPECT_EQ(AuditDecisions("c1"), std::vector<std::string>{"committed"});
}

TEST_F(DeduperTest, DuplicateOfFinishedCommandGetsStoredAnswerWithoutForward) {
  v1::Command c = Cmd("c1");
  upstream_.set_next_reply(FakeUpstream::Ok("first answer"));
  auto first = Submit(c);
  int64_t first_seen = clock_.NowMs();
  clock_.AdvanceMs(5'000);
  upstream_.set_next_reply(FakeUpstream::Ok("must not be used"));
  auto second = Submit(c);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->disposition(), v1::REPLAYED);
  EXPECT_EQ(second->result().SerializeAsString(), first->result().SerializeAsString());
  EXPECT_TRUE(second->replay().replayed());
  EXPECT_EQ(second->replay().first_seen_ms(), first_seen);
  EXPECT_EQ(second->replay().attempts(), 2u);
  EXPECT_EQ(upstream_.forwards(), 1u);
  EXPECT_EQ(deduper_->stats().replayed.load(), 1);
  // A duplicate is a read: nothing was written for the first, so the next one sees the
  // same count.
  EXPECT_EQ(Submit(c)->replay().attempts(), 2u);
}

// Retries by the sender are counted, not audited; the answer handed to another actor is.
TEST_F(DeduperTest, OnlyADuplicateFromAnotherActorIsAudited) {
  v1::Command c = Cmd("c1");  // states actor alice
  ASSERT_TRUE(Submit(c).ok());
  ASSERT_TRUE(Submit(c).ok());
  EXPECT_EQ(AuditDecisions("c1"), std::vector<std::string>{"committed"});
  v1::Command by_bob = c;
  by_bob.set_actor("bob");
  auto replayed = Submit(by_bob);
  ASSERT_TRUE(replayed.ok()) << replayed.status();
  EXPECT_EQ(replayed->disposition(), v1::REPLAYED);
  EXPECT_EQ(AuditDecisions("c1"), (std::vector<std::string>{"committed", "duplicate_returned"}));
  EXPECT_EQ(deduper_->stats().replayed.load(), 2);
}

TEST_F(DeduperTest, SameKeyDifferentPayloadIsATerminalConflict) {
  v1::Command c = Cmd("c1", "transfer 10");
  ASSERT_TRUE(Submit(c).ok());
  v1::Command other = Cmd("c1", "transfer 99");
  auto r = Submit(other);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(ReasonOf(r.status()), "IDEMPOTENCY_CONFLICT");
  EXPECT_EQ(upstream_.forwards(), 1u);
  EXPECT_EQ(AuditDecisions("c1"), (std::vector<std::string>{"committed", "conflict"}));
}

// A key belongs to the command that first used it: another command id under it is a
// terminal conflict, in Submit and in Reconcile, and never that command's answer.
TEST_F(DeduperTest, AnotherCommandUnderTheSameKeyIsAConflictNeverItsAnswer) {
  v1::Command first = Cmd("first");
  first.set_idempotency_key("invoice-42");
  ASSERT_TRUE(Submit(first).ok());
  v1::Command second = Cmd("second");
  second.set_idempotency_key("invoice-42");
  auto submitted = Submit(second);
  EXPECT_EQ(submitted.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(ReasonOf(submitted.status()), "KEY_REUSED");
  EXPECT_EQ(upstream_.forwards(), 1u);

  Caller caller;
  caller.tenant = "acme";
  v1::ReconcileRequest request;
  request.set_idempotency_key("invoice-42");
  request.set_expect_command_id("second");
  request.set_expect_payload_sha256(second.payload_hash().sha256());
  auto reconciled = deduper_->Reconcile(caller, request);
  EXPECT_EQ(reconciled.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(ReasonOf(reconciled.status()), "KEY_REUSED");

  v1::Command other_payload = Cmd("first", "transfer 99");
  other_payload.set_idempotency_key("invoice-42");
  request.set_expect_command_id("first");
  request.set_expect_payload_sha256(other_payload.payload_hash().sha256());
  reconciled = deduper_->Reconcile(caller, request);
  EXPECT_EQ(ReasonOf(reconciled.status()), "IDEMPOTENCY_CONFLICT");

  // The owner itself gets its outcome, and the answer names what holds the key.
  request.set_expect_payload_sha256(first.payload_hash().sha256());
  reconciled = deduper_->Reconcile(caller, request);
  ASSERT_TRUE(reconciled.ok()) << reconciled.status();
  EXPECT_EQ(reconciled->state(), v1::RECORD_COMMITTED);
  EXPECT_EQ(reconciled->command_id(), "first");
  EXPECT_EQ(reconciled->payload_sha256(), first.payload_hash().sha256());
}

// A forward never outlives its lease, so its late answer cannot lose to a takeover, even
// with a forward timeout that start-up would refuse.
TEST_F(DeduperTest, AForwardIsCutOffBeforeItsLeaseEnds) {
  DeduperOptions options;
  options.forward_timeout_ms = 4 * kLeaseMs;
  Restart(options);
  ASSERT_TRUE(Submit(Cmd("c1")).ok());
  EXPECT_EQ(upstream_.call(0).deadline_ms,
            clock_.NowMs() + kLeaseMs - DeduperOptions::kLeaseSlackMs);

  DeduperOptions valid;
  EXPECT_TRUE(ValidateDeduperOptions(valid).ok());
  valid.lease_ms = valid.forward_timeout_ms + valid.outcome_query_timeout_ms;
  absl::Status refused = ValidateDeduperOptions(valid);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("--lease_ms"), absl::string_view::npos) << refused;
}

// Records keep the retention they were written under. After a restart with a longer one,
// GetInfo keeps advertising the old value (which every stored record honours) until every
// command whose record was written before the change is older than the new value; an
// agent that believed the new value at once would resend a command whose record is gone
// and get it applied a second time.
TEST_F(DeduperTest, DuplicateWhileInFlightGetsInProgressWithRetryDelay) {
  upstream_.set_hold(true);
  v1::Command c = Cmd("c1");
  absl::StatusOr<v1::SubmitResponse> original = absl::InternalError("pending");
  Caller caller;
  caller.tenant = "acme";
  deduper_->Submit(caller, c, [&](auto r) { original = r; });
  clock_.AdvanceMs(1'000);
  auto duplicate = Submit(c);
  EXPECT_EQ(duplicate.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(ReasonOf(duplicate.status()), "IN_PROGRESS");
  ASSERT_TRUE(RetryAfterOf(duplicate.status()).has_value());
  EXPECT_EQ(*RetryAfterOf(duplicate.status()), 100);  // not the lease's remaining 9 s
  EXPECT_EQ(StateOf(c.idempotency_key()), v1::RECORD_PROCESSING);
  upstream_.Release(FakeUpstream::Ok("done"));
  ASSERT_TRUE(original.ok());
  EXPECT_EQ(upstream_.forwards(), 1u);
  // Other keys never wait on it.
  upstream_.set_hold(false);
  EXPECT_TRUE(Submit(Cmd("c2")).ok());
}

TEST_F(DeduperTest, BusinessRejectionIsStoredAndReplayedLikeASuccess) {
  v1::Command c = Cmd("c1");
  upstream_.set_next_reply(FakeUpstream::Rejected(9, "INSUFFICIENT_FUNDS: no"));
  auto first = Submit(c);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->result().code(), 9);
  auto second = Submit(c);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->disposition(), v1::REPLAYED);
  EXPECT_EQ(second->result().message(), "INSUFFICIENT_FUNDS: no");
  EXPECT_EQ(upstream_.forwards(), 1u);
  EXPECT_EQ(StateOf(c.idempotency_key()), v1::RECORD_FAILED);
}

TEST_F(DeduperTest, ProvenNotAppliedIsNotStoredAndMayBeRetried) {
  v1::Command c = Cmd("c1");
  upstream_.set_next_reply(FakeUpstream::Of(ForwardReply::Kind::kNotApplied));
  auto first = Submit(c);
  EXPECT_EQ(first.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(ReasonOf(first.status()), "UPSTREAM_UNAVAILABLE");
  EXPECT_EQ(StateOf(c.idempotency_key()), v1::RECORD_NOT_SEEN);
  upstream_.set_next_reply(FakeUpstream::Ok("ok"));
  EXPECT_TRUE(Submit(c).ok());
  EXPECT_EQ(upstream_.forwards(), 2u);
}

TEST_F(DeduperTest, AMethodTheBusinessLacksIsRefusedBeforeAnythingIsWritten) {
  upstream_.set_methods(std::set<std::string>{"/eonce.ledger.v1.Ledger/Transfer"});
  v1::Command typo = Cmd("typo");
  typo.set_target_method("/eonce.ledger.v1.Ledger/Tranfser");
  typo.set_idempotency_key("pay-1");
  FillPayloadHash(&typo);
  auto refused = Submit(typo);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReasonOf(refused.status()), "UNKNOWN_METHOD");
  EXPECT_EQ(upstream_.forwards(), 0u);
  EXPECT_EQ(StateOf("pay-1"), v1::RECORD_NOT_SEEN);
  EXPECT_TRUE(Submit(Cmd("known")).ok());
  // Not known yet (no catalog from the serving business): retryable; gRPC's own services
  // are never a command's, whatever the catalog lists. Nothing is written either way.
  const std::string health = "/grpc.health.v1.Health/Check";
  upstream_.set_methods(std::set<std::string>{health}, /*pending=*/true);
  EXPECT_EQ(ReasonOf(Submit(typo).status()), "CATALOG_PENDING");
  typo.set_target_method(health);
  FillPayloadHash(&typo);
  EXPECT_EQ(ReasonOf(Submit(typo).status()), "RESERVED_METHOD");
  EXPECT_EQ(upstream_.forwards(), 1u);
  EXPECT_EQ(StateOf("pay-1"), v1::RECORD_NOT_SEEN);
}

// Without a catalog (no reflection), the business's UNIMPLEMENTED is a refusal: nothing
// stored, the key stays free.
TEST_F(DeduperTest, UnimplementedFromTheBusinessFreesTheKey) {
  ForwardReply unimplemented = FakeUpstream::Rejected(12, "");
  unimplemented.kind = ForwardReply::Kind::kRefused;
  upstream_.set_next_reply(unimplemented);
  v1::Command c = Cmd("c1");
  auto refused = Submit(c);
  EXPECT_EQ(ReasonOf(refused.status()), "UPSTREAM_UNIMPLEMENTED");
  EXPECT_EQ(StateOf(c.idempotency_key()), v1::RECORD_NOT_SEEN);
  upstream_.set_next_reply(FakeUpstream::Ok("applied"));
  auto applied = Submit(c);
  ASSERT_TRUE(applied.ok()) << applied.status();
  EXPECT_EQ(applied->result().response(), "applied");
}

TEST_F(DeduperTest, UnreachableBusinessIsRefusedBeforeAnythingIsWritten) {
  upstream_.set_reachable(false);
  v1::Command c = Cmd("c1");
  auto r = Submit(c);
  EXPECT_EQ(ReasonOf(r.status()), "UPSTREAM_UNAVAILABLE");
  EXPECT_EQ(upstream_.forwards(), 0u);
  EXPECT_EQ(StateOf(c.idempotency_key()), v1::RECORD_NOT_SEEN);
}

TEST_F(DeduperTest, UnknownOutcomeIsRecoveredFromTheBusinessWithoutSecondForward) {
  v1::Command c = Cmd("c1");
  upstream_.set_next_reply(FakeUpstream::Of(ForwardReply::Kind::kUnknown));
  auto first = Submit(c);
  EXPECT_EQ(ReasonOf(first.status()), "OUTCOME_PENDING");
  EXPECT_EQ(StateOf(c.idempotency_key()), v1::RECORD_PROCESSING);

  v1::QueryOutcomeResponse applied;
  applied.set_applied(true);
  applied.mutable_result()->set_response("applied earlier");
  upstream_.set_outcome(applied);
  auto second = Submit(c);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->result().response(), "applied earlier");
  EXPECT_EQ(upstream_.forwards(), 1u);
  EXPECT_EQ(upstream_.queries(), 1u);
  EXPECT_EQ(StateOf(c.idempotency_key()), v1::RECORD_COMMITTED);
  EXPECT_EQ(AuditDecisions("c1"), std::vector<std::string>{"recovered"});
}

TEST_F(DeduperTest, UnknownOutcomeNotAppliedIsForwardedAgainUnderANewToken) {
  v1::Command c = Cmd("c1");
  upstream_.set_next_reply(FakeUpstream::Of(ForwardReply::Kind::kUnknown));
  Submit(c).IgnoreError();
  upstream_.set_outcome(v1::QueryOutcomeResponse());  // not applied
  upstream_.set_next_reply(FakeUpstream::Ok("second try"));
  auto r = Submit(c);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->result().response(), "second try");
  ASSERT_EQ(upstream_.forwards(), 2u);
  EXPECT_EQ(upstream_.call(0).fencing_token, 1u);
  EXPECT_EQ(upstream_.call(1).fencing_token, 2u);
}

TEST_F(DeduperTest, LegacyBusinessLeavesUnknownOutcomeParkedForAnOperator) {
  v1::Command c = Cmd("c1");
  upstream_.set_next_reply(FakeUpstream::Of(ForwardReply::Kind::kUnknown));
  Submit(c).IgnoreError();
  upstream_.set_outcome(absl::UnimplementedError("legacy"));
  auto parked = Submit(c);
  EXPECT_EQ(parked.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ReasonOf(parked.status()), "OUTCOME_UNKNOWN");
  // Never re-forwarded blindly, however often it is retried or restarted.
  for (int i = 0; i < 3; ++i) {
    clock_.AdvanceMs(kLeaseMs * 2);
    EXPECT_EQ(ReasonOf(Submit(c).status()), "OUTCOME_UNKNOWN");
  }
  Restart();
  EXPECT_EQ(ReasonOf(Submit(c).status()), "OUTCOME_UNKNOWN");
  EXPECT_EQ(upstream_.forwards(), 1u);
  EXPECT_EQ(store_->parked_count(), 1);
  EXPECT_EQ(StateOf(c.idempotency_key()), v1::RECORD_UNKNOWN_PARKED);

  Caller op;
  op.tenant = "acme";
  op.actor = "operator";
  Caller not_operator = op;
  EXPECT_EQ(ReasonOf(deduper_->ListParked(not_operator, 10).status()), "OPERATOR_REQUIRED");
  op.operator_name = "oncall";
  auto listed = deduper_->ListParked(op, 10);
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->records_size(), 1);
  EXPECT_EQ(listed->records(0).command_id(), "c1");
  Caller other_tenant;
  other_tenant.tenant = "globex";
  other_tenant.operator_name = "oncall";
  EXPECT_EQ(deduper_->ListParked(other_tenant, 10)->records_size(), 0);

  v1::ResolveParkedRequest resolve;
  resolve.set_idempotency_key(c.idempotency_key());
  resolve.set_applied(true);
  resolve.mutable_result()->set_response("confirmed by the ledger team");
  // Any workload of the tenant could free the key for a second forward: not without the
  // operator role.
  EXPECT_EQ(ReasonOf(deduper_->ResolveParked(not_operator, resolve).status()),
            "OPERATOR_REQUIRED");
  ASSERT_TRUE(deduper_->ResolveParked(op, resolve).ok());
  auto after = Submit(c);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->result().response(), "confirmed by the ledger team");
  EXPECT_EQ(store_->parked_count(), 0);
}

TEST_F(DeduperTest, CrashBetweenForwardAndOutcomeIsRecoveredAfterTheLease) {
  upstream_.set_hold(true);
  v1::Command c = Cmd("c1");
  Caller caller;
  caller.tenant = "acme";
  deduper_->Submit(caller, c, [](auto) {});  // the answer never comes: the sidecar dies
  ASSERT_EQ(upstream_.held(), 1u);
  Restart();
  upstream_.set_hold(false);
  EXPECT_EQ(ReasonOf(Submit(c).status()), "IN_PROGRESS");  // the lease still lives
  clock_.AdvanceMs(kLeaseMs);
  v1::QueryOutcomeResponse applied;
  applied.set_applied(true);
  applied.mutable_result()->set_response("it went through");
  upstream_.set_outcome(applied);
  auto r = Submit(c);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->result().response(), "it went through");
  EXPECT_EQ(upstream_.forwards(), 1u);
  EXPECT_EQ(Submit(c)->result().response(), "it went through");
}

// Two guarantees that rest on synced writes, each observed through a real crash (the
// crash file system loses what was not synced), then broken by its negative control.
TEST_F(DeduperTest, SameKeyUnderAnotherTenantIsIndependentAndRevealsNothing) {
  v1::Command c = Cmd("c1", "acme's payload");
  ASSERT_TRUE(Submit(c, "acme").ok());
  v1::Command theirs = Cmd("c1", "globex's payload");  // same key, other payload
  auto r = Submit(theirs, "globex");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->disposition(), v1::APPLIED);  // not a conflict: a different record
  EXPECT_EQ(upstream_.forwards(), 2u);
  EXPECT_EQ(StateOf(c.idempotency_key(), "initech"), v1::RECORD_NOT_SEEN);
}

TEST_F(DeduperTest, CommandNamingAnotherTenantIsDenied) {
  v1::Command c = Cmd("c1");
  c.set_tenant("globex");
  auto r = Submit(c, "acme");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(upstream_.forwards(), 0u);
  Caller nobody;
  absl::StatusOr<v1::SubmitResponse> out = absl::InternalError("");
  deduper_->Submit(nobody, Cmd("c2"), [&](auto r) { out = r; });
  EXPECT_EQ(out.status().code(), absl::StatusCode::kUnauthenticated);
}

TEST_F(DeduperTest, AuthorizationIsCheckedOnEveryDuplicate) {
  auto policy =
      Policy::Parse("act acme * *\nallow acme alice /eonce.ledger.v1.Ledger/Transfer\n");
  ASSERT_TRUE(policy.ok());
  policy_->Set(*policy);
  v1::Command c = Cmd("c1");
  c.set_credential_epoch(1);
  FillPayloadHash(&c);
  ASSERT_TRUE(Submit(c).ok());
  v1::Command bob = Cmd("c2");
  bob.set_actor("bob");
  EXPECT_EQ(ReasonOf(Submit(bob).status()), "POLICY_DENIED");

  policy_->Set(
      *Policy::Parse("act acme * *\nallow acme alice *\nrevoke acme alice below_epoch=2\n"));
  auto duplicate = Submit(c);
  EXPECT_EQ(duplicate.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(ReasonOf(duplicate.status()), "CREDENTIAL_REVOKED");
  EXPECT_EQ(upstream_.forwards(), 1u);
  EXPECT_EQ(AuditDecisions("c1"), (std::vector<std::string>{"committed", "unauthorized"}));

  DeduperOptions replay;
  replay.replay_after_revocation = true;
  Restart(replay);
  auto replayed = Submit(c);
  ASSERT_TRUE(replayed.ok()) << replayed.status();
  EXPECT_EQ(replayed->disposition(), v1::REPLAYED);
  // The setting replays finished commands only; it never lets a new one through.
  v1::Command fresh = Cmd("c3");
  fresh.set_credential_epoch(1);
  FillPayloadHash(&fresh);
  EXPECT_EQ(ReasonOf(Submit(fresh).status()), "CREDENTIAL_REVOKED");
}

TEST_F(DeduperTest, AWorkloadStatesOnlyTheActorsThePolicyLetsItActFor) {
  policy_->Set(*Policy::Parse("act acme payroll alice\nallow acme * *\n"));
  Caller billing;
  billing.tenant = "acme";
  billing.workload = "billing";
  v1::Command c = Cmd("c1");  // states actor alice
  absl::Status spoofed = SubmitAs(billing, c).status();
  EXPECT_EQ(spoofed.code(), absl::StatusCode::kPermissionDenied) << spoofed;
  EXPECT_EQ(ReasonOf(spoofed), "ACTOR_NOT_PERMITTED");
  // Nothing was written or forwarded, and the refusal is audited.
  EXPECT_EQ(StateOf(c.idempotency_key()), v1::RECORD_NOT_SEEN);
  EXPECT_EQ(upstream_.forwards(), 0u);
  EXPECT_EQ(AuditDecisions("c1"), (std::vector<std::string>{"unauthorized"}));
  // The actor header is a statement like the command's field.
  v1::Command unstated = Cmd("c2");
  unstated.clear_actor();
  FillPayloadHash(&unstated);
  Caller billing_for_alice = billing;
  billing_for_alice.actor = "alice";
  EXPECT_EQ(ReasonOf(SubmitAs(billing_for_alice, unstated).status()), "ACTOR_NOT_PERMITTED");
  // The negative control: the workload named for alice, and billing acting as itself.
  Caller payroll = billing;
  payroll.workload = "payroll";
  EXPECT_TRUE(SubmitAs(payroll, c).ok());
  EXPECT_TRUE(SubmitAs(billing, unstated).ok());
  EXPECT_EQ(upstream_.forwards(), 2u);
}

TEST_F(DeduperTest, AMalformedCommandIsAuditedAsInvalidWithinLimitsAndNothingIsWritten) {
  v1::Command c = Cmd("c1");
  c.set_idempotency_key(std::string(10'000, 'k'));  // past the 256-byte limit
  FillPayloadHash(&c);
  absl::Status refused = Submit(c).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
  EXPECT_EQ(upstream_.forwards(), 0u);
  EXPECT_EQ(AuditDecisions("c1"), (std::vector<std::string>{"invalid"}));
  v1::QueryAuditRequest request;
  request.set_command_id("c1");
  auto events = audit_->Query("acme", request);
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->size(), 1u);
  EXPECT_EQ((*events)[0].idempotency_key().size(), 256u);
  EXPECT_EQ((*events)[0].result(), "INVALID_FIELD");
}

TEST_F(DeduperTest, RetentionThenTombstoneThenForgotten) {
  v1::Command c = Cmd("c1", "payload");
  ASSERT_TRUE(Submit(c).ok());
  clock_.AdvanceMs(kRetentionMs - 1);
  EXPECT_EQ(Submit(c)->disposition(), v1::REPLAYED);
  clock_.AdvanceMs(1);
  // Past retention, before any compaction: reads already apply the rule.
  EXPECT_EQ(ReasonOf(Submit(c).status()), "RECORD_EXPIRED");
  EXPECT_EQ(ReasonOf(Submit(Cmd("c1", "other payload")).status()), "IDEMPOTENCY_CONFLICT");
  ASSERT_TRUE(store_->CompactAll().ok());
  EXPECT_GE(filters_->stats.trimmed.load(), 1);
  EXPECT_EQ(ReasonOf(Submit(c).status()), "RECORD_EXPIRED");
  EXPECT_EQ(StateOf(c.idempotency_key()), v1::RECORD_EXPIRED);
  EXPECT_EQ(upstream_.forwards(), 1u);
  clock_.AdvanceMs(kForensicMs);
  ASSERT_TRUE(store_->CompactAll().ok());
  EXPECT_EQ(StateOf(c.idempotency_key()), v1::RECORD_NOT_SEEN);
}

TEST_F(DeduperTest, StartedRecordNeverExpiresWhileLeased) {
  upstream_.set_hold(true);
  v1::Command c = Cmd("c1");
  Caller caller;
  caller.tenant = "acme";
  deduper_->Submit(caller, c, [](auto) {});
  clock_.AdvanceMs(kForensicMs * 2);
  ASSERT_TRUE(store_->CompactAll().ok());
  EXPECT_EQ(StateOf(c.idempotency_key()), v1::RECORD_PROCESSING);
  upstream_.Release(FakeUpstream::Ok("x"));
}

TEST_F(DeduperTest, InvalidCommandIsRejectedBeforeAnythingIsWritten) {
  v1::Command c = Cmd("c1");
  c.set_request(std::string((1 << 20) + 1, 'x'));
  FillPayloadHash(&c);
  auto r = Submit(c);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message().substr(0, 7), "request");
  v1::Command bad_hash = Cmd("c2");
  bad_hash.set_request("tampered");
  EXPECT_EQ(Submit(bad_hash).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(upstream_.forwards(), 0u);
  std::unique_ptr<rocksdb::Iterator> it(rocks_->db()->NewIterator(
      rocksdb::ReadOptions(), rocks_->cf("records")));
  it->SeekToFirst();
  EXPECT_FALSE(it->Valid()) << "a rejected request left a record behind";
}

TEST_F(DeduperTest, ReconcileByCommandIdAndKeyReportsEveryState) {
  Caller caller;
  caller.tenant = "acme";
  v1::ReconcileRequest by_id;
  by_id.set_command_id("c1");
  EXPECT_EQ(deduper_->Reconcile(caller, by_id)->state(), v1::RECORD_NOT_SEEN);
  upstream_.set_next_reply(FakeUpstream::Ok("r1"));
  ASSERT_TRUE(Submit(Cmd("c1")).ok());
  auto committed = deduper_->Reconcile(caller, by_id);
  EXPECT_EQ(committed->state(), v1::RECORD_COMMITTED);
  EXPECT_EQ(committed->result().response(), "r1");
  EXPECT_EQ(committed->idempotency_key(), Cmd("c1").idempotency_key());
  upstream_.set_next_reply(FakeUpstream::Rejected(10, "REVISION_CONFLICT"));
  ASSERT_TRUE(Submit(Cmd("c2")).ok());
  EXPECT_EQ(StateOf(Cmd("c2").idempotency_key()), v1::RECORD_FAILED);
  Caller other;
  other.tenant = "globex";
  EXPECT_EQ(deduper_->Reconcile(other, by_id)->state(), v1::RECORD_NOT_SEEN);
}

TEST_F(DeduperTest, SameKeyFromEightThreadsIsForwardedOnce) {
  upstream_.set_next_reply(FakeUpstream::Ok("the one answer"));
  v1::Command c = Cmd("hot");
  std::vector<std::thread> threads;
  std::atomic<int> answered{0}, in_progress{0}, other{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 50; ++i) {
        auto r = Submit(c);
        if (r.ok()) {
          EXPECT_EQ(r->result().response(), "the one answer");
          answered++;
        } else if (ReasonOf(r.status()) == "IN_PROGRESS") {
          in_progress++;
        } else {
          other++;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(upstream_.forwards(), 1u);
  EXPECT_EQ(answered + in_progress, 400);
  EXPECT_EQ(other.load(), 0);
}

TEST_F(DeduperTest, SameKeyWithTwoPayloadsFromManyThreadsAppliesOnce) {
  std::vector<std::thread> threads;
  std::atomic<int> applied{0}, conflicts{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      v1::Command c = Cmd("contested", t % 2 == 0 ? "payload A" : "payload B");
      for (int i = 0; i < 50; ++i) {
        auto r = Submit(c);
        if (r.ok() && r->disposition() == v1::APPLIED) applied++;
        if (ReasonOf(r.status()) == "IDEMPOTENCY_CONFLICT") conflicts++;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(upstream_.forwards(), 1u);
  EXPECT_EQ(applied.load(), 1);
  EXPECT_GE(conflicts.load(), 200);  // every attempt with the losing payload
}

TEST_F(DeduperTest, ReopenedWithRecordsInEveryStateEachNextAttemptIsRight) {
  // committed, failed, started (crashed), parked, tombstoned
  upstream_.set_next_reply(FakeUpstream::Ok("ok"));
  ASSERT_TRUE(Submit(Cmd("committed")).ok());
  upstream_.set_next_reply(FakeUpstream::Rejected(9, "nope"));
  ASSERT_TRUE(Submit(Cmd("failed")).ok());
  upstream_.set_next_reply(FakeUpstream::Of(ForwardReply::Kind::kUnknown));
  Submit(Cmd("parked")).IgnoreError();
  upstream_.set_outcome(absl::UnimplementedError("legacy"));
  Submit(Cmd("parked")).IgnoreError();
  upstream_.set_hold(true);
  Caller caller;
  caller.tenant = "acme";
  deduper_->Submit(caller, Cmd("started"), [](auto) {});
  size_t forwards_before = upstream_.forwards();

  Restart();
  upstream_.set_hold(false);
  EXPECT_EQ(Submit(Cmd("committed"))->disposition(), v1::REPLAYED);
  EXPECT_EQ(Submit(Cmd("failed"))->result().code(), 9);
  EXPECT_EQ(ReasonOf(Submit(Cmd("parked")).status()), "OUTCOME_UNKNOWN");
  EXPECT_EQ(ReasonOf(Submit(Cmd("started")).status()), "IN_PROGRESS");
  EXPECT_EQ(upstream_.forwards(), forwards_before);
  clock_.AdvanceMs(kLeaseMs);
  upstream_.set_outcome(v1::QueryOutcomeResponse());  // not applied
  upstream_.set_next_reply(FakeUpstream::Ok("now"));
  EXPECT_EQ(Submit(Cmd("started"))->result().response(), "now");
  EXPECT_EQ(upstream_.forwards(), forwards_before + 1);
}

}  // namespace
}  // namespace eonce
