// Where the truth is (docs/design.md): for a method whose business keeps an inbox, the
// business's durable write is the commit point, so the sidecar neither syncs its started
// record before the forward nor its outcome before the answer; for any other method it
// does both. And a key the business's inbox refuses is answered as a conflict, with the
// attempt's record freed.
#include <optional>
#include <vector>

#include "dedupe_sidecar/core/deduper_test_fixture.h"

namespace eonce {
namespace {

// Holds back every durability wait of the Deduper while `holding`, so that a test sees
// which steps wait for the sidecar's disk.
class HeldSyncs : public RecordStore {
 public:
  using RecordStore::RecordStore;
  void WhenDurable(Record::State state, RocksStore::DurableFn done) override {
    waits_++;
    if (holding_) {
      held_.push_back({state, std::move(done)});
      return;
    }
    RecordStore::WhenDurable(state, std::move(done));
  }
  void Hold() { holding_ = true; }
  void Release() {
    holding_ = false;
    std::vector<Held> held = std::move(held_);
    held_.clear();
    for (auto& h : held) RecordStore::WhenDurable(h.state, std::move(h.done));
  }
  size_t held() const { return held_.size(); }
  int waits() const { return waits_; }

 private:
  struct Held {
    Record::State state;
    RocksStore::DurableFn done;
  };
  bool holding_ = false;
  std::vector<Held> held_;
  int waits_ = 0;
};

class CommitPointTest : public DeduperTest {
 protected:
  CommitPointTest() : held_(*rocks_, clock_, retention_) {
    deduper_ = std::make_unique<Deduper>(held_, *audit_, upstream_, *policy_, clock_, options_);
  }
  ~CommitPointTest() override { deduper_.reset(); }

  // Submits without waiting for the answer: it lands in `out` whenever it comes.
  void Start(const v1::Command& c, std::optional<absl::StatusOr<v1::SubmitResponse>>* out) {
    Caller caller;
    caller.tenant = "acme";
    caller.workload = "agent";
    deduper_->Submit(caller, c, [out](absl::StatusOr<v1::SubmitResponse> r) { *out = r; });
  }

  HeldSyncs held_;
};

TEST_F(CommitPointTest, ABusinessThatKeepsAnInboxIsTheCommitPointAndOnlyThen) {
  upstream_.set_next_reply(FakeUpstream::Kept("one"));
  held_.Hold();
  std::optional<absl::StatusOr<v1::SubmitResponse>> first, second, duplicate, third, fourth;

  // The first call of a method: nothing is known of the business yet, so the started
  // record is synced before the forward.
  Start(Cmd("c1"), &first);
  EXPECT_EQ(upstream_.forwards(), 0u);
  EXPECT_EQ(held_.held(), 1u);
  held_.Release();
  EXPECT_EQ(upstream_.forwards(), 1u);
  ASSERT_TRUE(first.has_value() && first->ok()) << first->status();

  // Its answer said the inbox keeps the outcome: from now on nothing waits for the
  // sidecar's disk, neither the forward nor the answer.
  held_.Hold();
  const int waits = held_.waits();
  Start(Cmd("c2"), &second);
  EXPECT_EQ(upstream_.forwards(), 2u);
  ASSERT_TRUE(second.has_value() && second->ok()) << second->status();
  EXPECT_EQ((*second)->disposition(), v1::APPLIED);
  Start(Cmd("c2"), &duplicate);
  ASSERT_TRUE(duplicate.has_value() && duplicate->ok());
  EXPECT_EQ((*duplicate)->disposition(), v1::REPLAYED);
  EXPECT_EQ(held_.waits(), waits);
  EXPECT_EQ(deduper_->stats().forwards_before_sync.load(), 1);

  // The business comes back without its inbox (a legacy deployment): that answer waits
  // for the sidecar's outcome sync, and the next forward for the started record's again.
  upstream_.set_next_reply(FakeUpstream::Ok("legacy"));
  Start(Cmd("c3"), &third);
  EXPECT_EQ(upstream_.forwards(), 3u);
  EXPECT_FALSE(third.has_value());
  EXPECT_EQ(held_.held(), 1u);
  Start(Cmd("c4"), &fourth);
  EXPECT_EQ(upstream_.forwards(), 3u);
  EXPECT_EQ(held_.held(), 2u);
  held_.Release();
  EXPECT_EQ(upstream_.forwards(), 4u);
  ASSERT_TRUE(third.has_value() && third->ok());
  ASSERT_TRUE(fourth.has_value() && fourth->ok());
  EXPECT_EQ(deduper_->stats().forwards_before_sync.load(), 2);
}

TEST_F(CommitPointTest, AnOperatorMayKeepTheSidecarAsTheCommitPoint) {
  DeduperOptions options = options_;
  options.business_commit_point = false;
  deduper_ = std::make_unique<Deduper>(held_, *audit_, upstream_, *policy_, clock_, options);
  upstream_.set_next_reply(FakeUpstream::Kept("one"));
  ASSERT_TRUE(Submit(Cmd("c1")).ok());
  held_.Hold();
  std::optional<absl::StatusOr<v1::SubmitResponse>> second;
  Start(Cmd("c2"), &second);
  EXPECT_EQ(upstream_.forwards(), 1u);  // the started record waits for its sync
  held_.Release();
  ASSERT_TRUE(second.has_value() && second->ok());
  EXPECT_EQ(deduper_->stats().forwards_before_sync.load(), 0);
}

TEST_F(CommitPointTest, AnOutcomeRecoveredFromTheInboxIsAnsweredWithoutASync) {
  // A forward whose answer was lost, then recovery: QueryOutcome says applied.
  upstream_.set_next_reply(FakeUpstream::Of(ForwardReply::Kind::kUnknown));
  std::optional<absl::StatusOr<v1::SubmitResponse>> lost, recovered;
  Start(Cmd("c1"), &lost);
  ASSERT_TRUE(lost.has_value());
  EXPECT_EQ(ReasonOf(lost->status()), "OUTCOME_PENDING");
  v1::QueryOutcomeResponse applied;
  applied.set_applied(true);
  applied.mutable_result()->set_response("from the inbox");
  upstream_.set_outcome(applied);
  held_.Hold();
  Start(Cmd("c1"), &recovered);
  // The takeover of the record is synced (nothing is known of the method yet); the
  // answer, resting on the inbox's durable entry, is not.
  ASSERT_EQ(held_.held(), 1u);
  held_.Release();
  held_.Hold();
  ASSERT_TRUE(recovered.has_value() && recovered->ok()) << recovered->status();
  EXPECT_EQ((*recovered)->result().response(), "from the inbox");
  EXPECT_EQ(held_.held(), 0u);
}

TEST_F(CommitPointTest, AKeyTheInboxRefusesIsAConflictAndFreesTheAttemptsRecord) {
  ForwardReply conflict = FakeUpstream::Of(ForwardReply::Kind::kConflict);
  conflict.detail = "KEY_REUSED";
  conflict.result.set_code(static_cast<int>(absl::StatusCode::kAlreadyExists));
  conflict.result.set_message("this idempotency key belongs to another command id");
  upstream_.set_next_reply(conflict);
  v1::Command c = Cmd("c1");
  auto refused = Submit(c);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(ReasonOf(refused.status()), "KEY_REUSED");
  EXPECT_EQ(StateOf(c.idempotency_key()), v1::RECORD_NOT_SEEN);
  EXPECT_EQ(deduper_->stats().conflicts.load(), 1);
  std::vector<std::string> decisions = AuditDecisions("c1");
  EXPECT_NE(std::find(decisions.begin(), decisions.end(), "conflict"), decisions.end());
  // Nothing of this attempt stays behind: the key's owner, retried, is forwarded again
  // and answered (by the inbox, in a real business).
  upstream_.set_next_reply(FakeUpstream::Kept("the owner's answer"));
  auto owner = Submit(c);
  ASSERT_TRUE(owner.ok()) << owner.status();
  EXPECT_EQ(owner->result().response(), "the owner's answer");
}

}  // namespace
}  // namespace eonce
