// The answers of one batched business call reach the Deduper back to back inside a
// CallbackBatch: their outcome records are written together when it closes (one write),
// each caller still gets its own answer, a stale attempt still cannot overwrite, and a
// failed write answers none of them as applied.
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/callback_batch.h"
#include "dedupe_sidecar/core/deduper_test_fixture.h"

namespace eonce {
namespace {

// Counts the record writes and what they carry; fails them while `failing`.
class CountedWrites : public RecordStore {
 public:
  using RecordStore::RecordStore;
  absl::Status WriteMany(const std::vector<RecordWrite>& writes, bool sync) override {
    writes_++;
    for (const RecordWrite& w : writes) {
      if (w.record->state() == Record::COMMITTED) committed_written_++;
    }
    if (failing_) return absl::UnavailableError("disk gone");
    return RecordStore::WriteMany(writes, sync);
  }
  int writes() const { return writes_; }
  int committed_written() const { return committed_written_; }
  void set_failing(bool failing) { failing_ = failing; }

 private:
  int writes_ = 0;
  int committed_written_ = 0;
  bool failing_ = false;
};

class FinishBatchTest : public DeduperTest {
 protected:
  FinishBatchTest() : counted_(*rocks_, clock_, retention_) {
    deduper_ = std::make_unique<Deduper>(counted_, *audit_, upstream_, *policy_, clock_, options_);
  }
  ~FinishBatchTest() override { deduper_.reset(); }

  using Answer = std::optional<absl::StatusOr<v1::SubmitResponse>>;
  void Start(const v1::Command& c, Answer* out) {
    Caller caller;
    caller.tenant = "acme";
    caller.workload = "agent";
    deduper_->Submit(caller, c, [out](absl::StatusOr<v1::SubmitResponse> r) { *out = r; });
  }

  // One kept command first, so that the business is known to keep its inbox (the forwards
  // then go before any sync: nothing of the sidecar's is written until the answers).
  void LearnKept() {
    upstream_.set_next_reply(FakeUpstream::Kept("warm-up"));
    ASSERT_TRUE(Submit(Cmd("warm-up")).ok());
    upstream_.set_hold(true);
  }

  CountedWrites counted_;
};

TEST_F(FinishBatchTest, AnswersDeliveredTogetherAreStoredInOneWriteEachInItsOwnPlace) {
  LearnKept();
  constexpr int kCalls = 5;
  std::vector<Answer> answers(kCalls);
  for (int i = 0; i < kCalls; ++i) Start(Cmd(absl::StrCat("c", i)), &answers[i]);
  ASSERT_EQ(upstream_.held(), static_cast<size_t>(kCalls));
  const int writes_before = counted_.writes();
  {
    CallbackBatch together;
    for (int i = 0; i < kCalls; ++i) upstream_.Release(FakeUpstream::Kept(absl::StrCat("r", i)));
    // Nothing is stored or answered until the batch closes.
    EXPECT_EQ(counted_.writes(), writes_before);
    for (const Answer& a : answers) EXPECT_FALSE(a.has_value());
  }
  EXPECT_EQ(counted_.writes(), writes_before + 1);
  EXPECT_EQ(counted_.committed_written(), 1 + kCalls);  // the warm-up's, then the batch's
  for (int i = 0; i < kCalls; ++i) {
    ASSERT_TRUE(answers[i].has_value() && answers[i]->ok()) << i;
    EXPECT_EQ((*answers[i])->disposition(), v1::APPLIED);
    EXPECT_EQ((*answers[i])->result().response(), absl::StrCat("r", i));
    // Each key holds its own outcome: a duplicate replays it without a forward.
    upstream_.set_hold(false);
    auto replay = Submit(Cmd(absl::StrCat("c", i)));
    ASSERT_TRUE(replay.ok()) << replay.status();
    EXPECT_EQ(replay->disposition(), v1::REPLAYED);
    EXPECT_EQ(replay->result().response(), absl::StrCat("r", i));
  }
  EXPECT_EQ(upstream_.forwards(), static_cast<size_t>(1 + kCalls));
  EXPECT_EQ(deduper_->stats().applied.load(), 1 + kCalls);
  EXPECT_EQ(deduper_->claims(), 0u);
}

TEST_F(FinishBatchTest, AFailedWriteAnswersNoneOfTheBatchAsApplied) {
  LearnKept();
  std::vector<Answer> answers(3);
  for (int i = 0; i < 3; ++i) Start(Cmd(absl::StrCat("c", i)), &answers[i]);
  counted_.set_failing(true);
  {
    CallbackBatch together;
    for (int i = 0; i < 3; ++i) upstream_.Release(FakeUpstream::Kept(absl::StrCat("r", i)));
  }
  for (const Answer& a : answers) {
    ASSERT_TRUE(a.has_value());
    EXPECT_EQ(a->status().code(), absl::StatusCode::kUnavailable) << a->status();
  }
  EXPECT_EQ(deduper_->stats().store_errors.load(), 3);
  EXPECT_EQ(deduper_->stats().applied.load(), 1);  // the warm-up only
  // Each claim stays and blocks its key until its lease ends, as a started record would:
  // a duplicate meanwhile is told to come back, not forwarded again.
  counted_.set_failing(false);
  upstream_.set_hold(false);
  auto duplicate = Submit(Cmd("c0"));
  EXPECT_EQ(ReasonOf(duplicate.status()), "IN_PROGRESS") << duplicate.status();
  EXPECT_EQ(upstream_.forwards(), 4u);
}

TEST_F(FinishBatchTest, AStaleAttemptsAnswerInTheSameBatchReadsWhatTheHolderWrote) {
  // The first attempt's forward is held past its lease; the next attempt recovers the
  // key (the business says nothing was applied) and forwards again under a new token.
  upstream_.set_hold(true);
  v1::Command c = Cmd("c1");
  Answer first, second;
  Start(c, &first);
  ASSERT_EQ(upstream_.held(), 1u);
  clock_.AdvanceMs(kLeaseMs + 1);
  upstream_.set_outcome(v1::QueryOutcomeResponse());  // not applied
  Start(c, &second);
  ASSERT_EQ(upstream_.held(), 2u);
  ASSERT_EQ(upstream_.call(1).fencing_token, upstream_.call(0).fencing_token + 1);
  {
    CallbackBatch together;
    upstream_.ReleaseNewest(FakeUpstream::Ok("holder"));
    upstream_.Release(FakeUpstream::Ok("stale"));
  }
  ASSERT_TRUE(second.has_value() && second->ok()) << second->status();
  EXPECT_EQ((*second)->disposition(), v1::APPLIED);
  EXPECT_EQ((*second)->result().response(), "holder");
  // The stale answer was not stored: its caller gets the holder's outcome, read after
  // the holder's write (a key met twice in a batch waits for the next round).
  ASSERT_TRUE(first.has_value() && first->ok()) << first->status();
  EXPECT_EQ((*first)->disposition(), v1::REPLAYED);
  EXPECT_EQ((*first)->result().response(), "holder");
  EXPECT_EQ(deduper_->stats().fenced.load(), 1);
  upstream_.set_hold(false);
  auto replay = Submit(c);
  ASSERT_TRUE(replay.ok());
  EXPECT_EQ(replay->result().response(), "holder");
}

}  // namespace
}  // namespace eonce
