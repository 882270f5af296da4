// InboxUpstream, the embedded sidecar's in-process business: a real Inbox on RocksDB in a
// test folder, a handler that applies through it, and a manual clock for the deadlines.
#include "services/inbox/inbox_upstream.h"

#include <atomic>
#include <memory>
#include <string>

#include "absl/synchronization/notification.h"
#include "common/base/clock.h"
#include "common/coord/slots.h"
#include "gtest/gtest.h"
#include "tests/util/temp_dir.h"

namespace eonce {
namespace {

constexpr char kAdd[] = "/test.Counter/Add";

class InboxUpstreamTest : public ::testing::Test {
 protected:
  InboxUpstreamTest() {
    auto store = RocksStore::Open(testing::FreshDir("inbox-upstream"),
                                  Inbox::ColumnFamilies(clock_), StoreOptions());
    EXPECT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    inbox_ = std::make_unique<Inbox>(*store_, clock_, /*legacy_mode=*/false);
    std::map<std::string, InboxUpstream::Handler> handlers;
    handlers[kAdd] = [this](const CallIdentity& identity,
                            const std::string&) -> absl::StatusOr<v1::CallResult> {
      return inbox_->Run(identity, {"counter/1"},
                         [this](rocksdb::WriteBatch*, uint64_t) -> absl::StatusOr<Applied> {
                           applies_.fetch_add(1);
                           Applied applied;
                           applied.result.set_response("added");
                           v1::Effect effect;
                           effect.set_entity("counter/1");
                           effect.set_method(kAdd);
                           applied.effect = effect;
                           return applied;
                         });
    };
    upstream_ = std::make_unique<InboxUpstream>(*inbox_, std::move(handlers), clock_);
  }

  ForwardCall Call(const std::string& command_id, int64_t deadline_ms) {
    ForwardCall call;
    call.method = kAdd;
    call.command_id = command_id;
    call.idempotency_key = "key-" + command_id;
    call.tenant = "acme";
    call.actor = "alice";
    call.fencing_token = 1;
    call.deadline_ms = deadline_ms;
    return call;
  }

  // Forwards and returns the reply (the inbox's store answers on the committer thread, so
  // the reply is awaited).
  ForwardReply Forward(ForwardCall call) {
    ForwardReply reply;
    absl::Notification answered;
    upstream_->Forward(std::move(call), [&](ForwardReply r) {
      reply = std::move(r);
      answered.Notify();
    });
    answered.WaitForNotification();
    return reply;
  }

  bool WasApplied(const std::string& command_id) {
    auto outcome = inbox_->QueryOutcome("acme", command_id);
    EXPECT_TRUE(outcome.ok()) << outcome.status();
    return outcome.ok() && outcome->applied();
  }

  ManualClock clock_;
  std::unique_ptr<RocksStore> store_;
  std::unique_ptr<Inbox> inbox_;
  std::unique_ptr<InboxUpstream> upstream_;
  std::atomic<int> applies_{0};
};

TEST_F(InboxUpstreamTest, AForwardWhoseDeadlinePassedBeforeItStartsIsNotApplied) {
  // Its deadline is now: the caller stopped waiting as the call arrived.
  ForwardReply late = Forward(Call("late", clock_.NowMs()));
  EXPECT_EQ(late.kind, ForwardReply::Kind::kNotApplied) << late.detail;
  EXPECT_EQ(late.result.code(), static_cast<int>(absl::StatusCode::kDeadlineExceeded));
  EXPECT_NE(late.detail.find("DEADLINE_EXCEEDED"), std::string::npos) << late.detail;
  EXPECT_EQ(applies_.load(), 0);
  EXPECT_FALSE(WasApplied("late"));

  // One past its deadline by a long way, the same.
  ForwardReply stale = Forward(Call("stale", clock_.NowMs() - 60'000));
  EXPECT_EQ(stale.kind, ForwardReply::Kind::kNotApplied);
  EXPECT_EQ(applies_.load(), 0);
}

TEST_F(InboxUpstreamTest, AForwardWithinItsDeadlineOrWithoutOneIsApplied) {
  ForwardReply in_time = Forward(Call("in-time", clock_.NowMs() + 1));
  EXPECT_EQ(in_time.kind, ForwardReply::Kind::kAnswered) << in_time.detail;
  EXPECT_EQ(in_time.result.response(), "added");
  EXPECT_TRUE(in_time.inbox_kept);
  EXPECT_TRUE(WasApplied("in-time"));

  // No deadline (a ForwardBatch item carries none): applied.
  ForwardReply unbounded = Forward(Call("unbounded", 0));
  EXPECT_EQ(unbounded.kind, ForwardReply::Kind::kAnswered) << unbounded.detail;
  EXPECT_EQ(applies_.load(), 2);

  // The clock moves past a deadline: the next call under it is refused, nothing applied.
  const int64_t deadline_ms = clock_.NowMs() + 100;
  clock_.AdvanceMs(100);
  ForwardReply expired = Forward(Call("expired", deadline_ms));
  EXPECT_EQ(expired.kind, ForwardReply::Kind::kNotApplied);
  EXPECT_EQ(applies_.load(), 2);
  EXPECT_FALSE(WasApplied("expired"));
}

// A forward below its slot's fence (a ForwardBatch item, through its wire form) applied
// nothing: the sidecar is told "not applied", never an outcome to keep.
TEST_F(InboxUpstreamTest, AForwardBelowItsSlotsFenceIsNotApplied) {
  const uint32_t slot = SlotOf("acme", "counter", "1");
  v1::DropSlotDataRequest drop;
  drop.set_first_slot(slot);
  drop.set_last_slot(slot);
  drop.set_epoch(9);
  ASSERT_TRUE(inbox_->DropSlotData(drop).ok());
  ForwardCall call = Call("fenced", 0);
  call.entity = "counter/1";
  call.slot = slot;
  call.slot_epoch = 3;
  ForwardReply fenced = Forward(ForwardCallOf(ForwardedCallOf(call)));
  EXPECT_EQ(fenced.kind, ForwardReply::Kind::kNotApplied) << fenced.detail;
  EXPECT_EQ(applies_.load(), 0);
  EXPECT_FALSE(WasApplied("fenced"));

  call.slot_epoch = 10;  // admitted by a newer map, under which the slot is here again
  ForwardReply admitted = Forward(ForwardCallOf(ForwardedCallOf(call)));
  EXPECT_EQ(admitted.kind, ForwardReply::Kind::kAnswered) << admitted.detail;
  EXPECT_TRUE(WasApplied("fenced"));
}

}  // namespace
}  // namespace eonce
