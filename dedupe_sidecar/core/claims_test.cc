// In-flight claims (in_flight_claims.h): for a method whose business keeps an inbox, a
// first attempt is claimed in memory instead of written as a started record. The claim
// must do all the record did while the command is in flight — turn duplicates away, refuse
// another payload, answer Reconcile, fence a late answer — and hand over to a stored
// record whenever the flow ends without an outcome that the business said it applied.
#include <optional>

#include "absl/strings/str_cat.h"
#include "dedupe_sidecar/core/deduper_test_fixture.h"

namespace eonce {
namespace {

class ClaimsTest : public DeduperTest {
 protected:
  ClaimsTest() { Use(claims_); }
  ~ClaimsTest() override { deduper_.reset(); }

  void Use(InFlightClaims& claims) {
    deduper_ = std::make_unique<Deduper>(*store_, *audit_, upstream_, *policy_, clock_, options_,
                                         nullptr, nullptr, &claims);
    // The first answer teaches the Deduper that the business keeps an inbox.
    upstream_.set_next_reply(FakeUpstream::Kept("learned"));
    auto taught = Submit(Cmd(absl::StrCat("teach-", ++teachings_)));
    ASSERT_TRUE(taught.ok()) << taught.status();
  }

  void Start(const v1::Command& c, std::optional<absl::StatusOr<v1::SubmitResponse>>* out) {
    Caller caller;
    caller.tenant = "acme";
    caller.workload = "agent";
    deduper_->Submit(caller, c, [out](absl::StatusOr<v1::SubmitResponse> r) { *out = r; });
  }

  std::optional<Record> Stored(const v1::Command& c) {
    auto record = store_->Get("acme", c.idempotency_key());
    EXPECT_TRUE(record.ok()) << record.status();
    return record.ok() ? *record : std::nullopt;
  }

  // Sends `c` with its forward held, then a duplicate of it: how many forwards the
  // business got by then.
  size_t ForwardsAfterADuplicateInFlight(const v1::Command& c) {
    upstream_.set_hold(true);
    std::optional<absl::StatusOr<v1::SubmitResponse>> original, duplicate;
    const size_t before = upstream_.forwards();
    Start(c, &original);
    Start(c, &duplicate);
    const size_t forwards = upstream_.forwards() - before;
    upstream_.set_hold(false);
    while (upstream_.held() > 0) upstream_.Release(FakeUpstream::Kept("done"));
    return forwards;
  }

  // Members, so that they outlive the Deduper (reset in the destructor above).
  int teachings_ = 0;
  InFlightClaims claims_;
  InFlightClaims one_{1};
  InFlightClaims fresh_;
  ForgetfulClaims forgetful_;
};

TEST_F(ClaimsTest, AFirstAttemptIsClaimedInMemoryAndBlocksWhatTheRecordBlocked) {
  v1::Command c = Cmd("c1");
  upstream_.set_hold(true);
  std::optional<absl::StatusOr<v1::SubmitResponse>> original;
  Start(c, &original);
  ASSERT_EQ(upstream_.held(), 1u);
  // Nothing is written for it; the claim holds it.
  EXPECT_FALSE(Stored(c).has_value());
  EXPECT_EQ(deduper_->claims(), 1u);
  EXPECT_EQ(deduper_->stats().claimed_in_memory.load(), 1);

  // A duplicate is turned away, another payload under the key is refused, and Reconcile
  // sees the command in flight, by key and by command id.
  auto duplicate = Submit(c);
  EXPECT_EQ(ReasonOf(duplicate.status()), "IN_PROGRESS");
  v1::Command other = c;
  other.set_request("transfer 99");
  FillPayloadHash(&other);
  EXPECT_EQ(ReasonOf(Submit(other).status()), "IDEMPOTENCY_CONFLICT");
  EXPECT_EQ(StateOf(c.idempotency_key()), v1::RECORD_PROCESSING);
  Caller caller;
  caller.tenant = "acme";
  v1::ReconcileRequest by_id;
  by_id.set_command_id("c1");
  auto reconciled = deduper_->Reconcile(caller, by_id);
  ASSERT_TRUE(reconciled.ok()) << reconciled.status();
  EXPECT_EQ(reconciled->state(), v1::RECORD_PROCESSING);
  EXPECT_EQ(upstream_.forwards(), 2u);  // the teaching call and c1, once

  // The answer stores the outcome and frees the claim.
  upstream_.Release(FakeUpstream::Kept("applied"));
  ASSERT_TRUE(original.has_value() && original->ok()) << original->status();
  EXPECT_EQ(deduper_->claims(), 0u);
  std::optional<Record> stored = Stored(c);
  ASSERT_TRUE(stored.has_value());
  EXPECT_EQ(stored->state(), Record::COMMITTED);
  auto replay = Submit(c);
  ASSERT_TRUE(replay.ok()) << replay.status();
  EXPECT_EQ(replay->disposition(), v1::REPLAYED);
  EXPECT_EQ(replay->result().response(), "applied");
}

// The negative control: a table that keeps no claim lets a duplicate through to the
// business while the original is in flight.
TEST_F(ClaimsTest, NegativeControlAForgetfulTableForwardsADuplicateInFlight) {
  EXPECT_EQ(ForwardsAfterADuplicateInFlight(Cmd("kept")), 1u);
  Use(forgetful_);
  EXPECT_EQ(ForwardsAfterADuplicateInFlight(Cmd("forgotten")), 2u);
}

TEST_F(ClaimsTest, AnUnknownOutcomeLeavesAStartedRecordThatRecoveryTakesOver) {
  v1::Command c = Cmd("c1");
  upstream_.set_next_reply(FakeUpstream::Of(ForwardReply::Kind::kUnknown));
  auto lost = Submit(c);
  EXPECT_EQ(ReasonOf(lost.status()), "OUTCOME_PENDING");
  EXPECT_EQ(deduper_->claims(), 0u);
  std::optional<Record> stored = Stored(c);
  ASSERT_TRUE(stored.has_value());
  EXPECT_EQ(stored->state(), Record::STARTED);
  EXPECT_LE(stored->lease_expires_ms(), clock_.NowMs());

  v1::QueryOutcomeResponse applied;
  applied.set_applied(true);
  applied.mutable_result()->set_response("from the inbox");
  upstream_.set_outcome(applied);
  const size_t forwards = upstream_.forwards();
  auto recovered = Submit(c);
  ASSERT_TRUE(recovered.ok()) << recovered.status();
  EXPECT_EQ(recovered->result().response(), "from the inbox");
  EXPECT_EQ(upstream_.queries(), 1u);
  EXPECT_EQ(upstream_.forwards(), forwards);  // recovered, not forwarded again
}

TEST_F(ClaimsTest, NothingAppliedFreesTheKey) {
  v1::Command c = Cmd("c1");
  upstream_.set_next_reply(FakeUpstream::Of(ForwardReply::Kind::kNotApplied));
  EXPECT_EQ(ReasonOf(Submit(c).status()), "UPSTREAM_UNAVAILABLE");
  EXPECT_EQ(deduper_->claims(), 0u);
  EXPECT_FALSE(Stored(c).has_value());
  upstream_.set_next_reply(FakeUpstream::Kept("second try"));
  auto again = Submit(c);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->result().response(), "second try");
}

// A claim whose lease ran out (its forward never came back in time) is taken over as a
// stored record under a new token; the late answer of the old forward is fenced.
TEST_F(ClaimsTest, AnExpiredClaimIsTakenOverAndItsLateAnswerFenced) {
  v1::Command c = Cmd("c1");
  upstream_.set_hold(true);
  std::optional<absl::StatusOr<v1::SubmitResponse>> original;
  Start(c, &original);
  ASSERT_EQ(upstream_.held(), 1u);
  clock_.AdvanceMs(kLeaseMs + 1);
  v1::QueryOutcomeResponse not_applied;
  not_applied.set_applied(false);
  upstream_.set_outcome(not_applied);
  std::optional<absl::StatusOr<v1::SubmitResponse>> takeover;
  Start(c, &takeover);
  EXPECT_EQ(upstream_.queries(), 1u);
  ASSERT_EQ(upstream_.held(), 2u);  // not applied, so forwarded again under token 2
  EXPECT_EQ(deduper_->claims(), 0u);
  std::optional<Record> stored = Stored(c);
  ASSERT_TRUE(stored.has_value());
  EXPECT_EQ(stored->fencing_token(), 2u);

  upstream_.Release(FakeUpstream::Kept("stale"));  // the first forward's late answer
  ASSERT_TRUE(original.has_value());
  EXPECT_EQ(ReasonOf(original->status()), "IN_PROGRESS");
  EXPECT_EQ(deduper_->stats().fenced.load(), 1);
  upstream_.Release(FakeUpstream::Kept("fresh"));
  ASSERT_TRUE(takeover.has_value() && takeover->ok()) << takeover->status();
  EXPECT_EQ((*takeover)->result().response(), "fresh");
  EXPECT_EQ(Stored(c)->result().response(), "fresh");
}

// A crash forgets the claims: with the first forward still in flight, the next attempt is
// forwarded again, and the business's inbox (the commit point) answers it. Nothing of the
// claim was ever on disk.
TEST_F(ClaimsTest, ACrashForgetsAClaimAndTheNextAttemptIsForwarded) {
  v1::Command c = Cmd("c1");
  upstream_.set_hold(true);
  std::optional<absl::StatusOr<v1::SubmitResponse>> original;
  Start(c, &original);
  ASSERT_EQ(upstream_.held(), 1u);  // never answered: the process dies first
  upstream_.set_hold(false);
  Restart();
  Use(fresh_);
  EXPECT_FALSE(Stored(c).has_value());
  const size_t forwards = upstream_.forwards();
  upstream_.set_next_reply(FakeUpstream::Kept("from the inbox"));
  auto again = Submit(c);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(upstream_.forwards(), forwards + 1);
}

// A claim writes nothing, but the outcome will: a store that takes no writes refuses the
// command before the business sees it (tests/faults:disk_test does the same for a full
// disk).
TEST_F(ClaimsTest, AStoreThatTakesNoWritesRefusesBeforeTheForward) {
  const size_t forwards = upstream_.forwards();
  rocks_->MarkFailed();
  auto refused = Submit(Cmd("c1"));
  EXPECT_EQ(ReasonOf(refused.status()), "STORE_FAILED");
  EXPECT_EQ(upstream_.forwards(), forwards);
  EXPECT_EQ(deduper_->claims(), 0u);
}

TEST_F(ClaimsTest, AFullTableFallsBackToAStartedRecord) {
  InFlightClaims& one = one_;
  Use(one);
  upstream_.set_hold(true);
  std::optional<absl::StatusOr<v1::SubmitResponse>> first, second;
  v1::Command a = Cmd("a");
  v1::Command b = Cmd("b");
  Start(a, &first);
  Start(b, &second);
  ASSERT_EQ(upstream_.held(), 2u);
  EXPECT_EQ(one.size(), 1u);
  EXPECT_FALSE(Stored(a).has_value());
  std::optional<Record> stored = Stored(b);
  ASSERT_TRUE(stored.has_value());
  EXPECT_EQ(stored->state(), Record::STARTED);
  EXPECT_EQ(ReasonOf(Submit(b).status()), "IN_PROGRESS");
  upstream_.Release(FakeUpstream::Kept("a"));
  upstream_.Release(FakeUpstream::Kept("b"));
  ASSERT_TRUE(first.has_value() && first->ok());
  ASSERT_TRUE(second.has_value() && second->ok());
  EXPECT_EQ(Stored(a)->state(), Record::COMMITTED);
  EXPECT_EQ(Stored(b)->state(), Record::COMMITTED);
  EXPECT_EQ(one.size(), 0u);
}

}  // namespace
}  // namespace eonce
