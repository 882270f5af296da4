// A slow audit log holds up no decision: a Submit that holds its key's lock never waits for
// the audit writer, and while the writer is behind new commands are turned away before
// anything is decided for them.
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "dedupe_sidecar/core/deduper_test_fixture.h"

namespace eonce {
namespace {

class AuditBacklogTest : public DeduperTest {
 protected:
  ~AuditBacklogTest() override { Unstall(); }

  // The Deduper again, over an audit log of `max_queue` events whose writer stalls before
  // each write until Unstall (a disk that stopped answering).
  void OpenWithStallingAudit(size_t max_queue) {
    deduper_.reset();
    audit_.reset();
    audit_ = std::make_unique<AuditLog>(*rocks_, clock_, 10 * kForensicMs, max_queue,
                                        absl::ZeroDuration(), [this] {
                                          if (!writing_.HasBeenNotified()) writing_.Notify();
                                          unstall_.WaitForNotification();
                                        });
    deduper_ = std::make_unique<Deduper>(*store_, *audit_, upstream_, *policy_, clock_, options_);
  }

  void Unstall() {
    if (!unstall_.HasBeenNotified()) unstall_.Notify();
  }

  absl::Notification writing_;  // the writer took its first events and stalls
  absl::Notification unstall_;
};

TEST_F(AuditBacklogTest, AStalledAuditWriterHoldsUpNoDecisionAndTurnsNewCommandsAway) {
  OpenWithStallingAudit(/*max_queue=*/2);
  ASSERT_TRUE(Submit(Cmd("first")).ok());
  writing_.WaitForNotification();  // the writer holds "first"'s event and stalls

  // A command goes to the business; its outcome, and its audit event, come later.
  upstream_.set_hold(true);
  Caller caller;
  caller.tenant = "acme";
  caller.workload = "agent";
  absl::StatusOr<v1::SubmitResponse> held = absl::InternalError("not answered");
  deduper_->Submit(caller, Cmd("held"), [&](absl::StatusOr<v1::SubmitResponse> r) { held = r; });
  ASSERT_EQ(upstream_.held(), 1u);
  upstream_.set_hold(false);

  // One more fills the queue, with the room the held command's event will need.
  ASSERT_TRUE(Submit(Cmd("second")).ok());
  auto refused = Submit(Cmd("third"));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ReasonOf(refused.status()), "AUDIT_BACKLOG");
  EXPECT_EQ(upstream_.forwards(), 3u) << "the refused command reached the business";
  EXPECT_EQ(deduper_->stats().audit_backlog.load(), 1);

  // The held command's answer comes: its outcome is stored and audited under its key's
  // lock while the writer is still stalled, and the Submit finishes.
  absl::Notification finished;
  std::thread business([&] {
    upstream_.Release(FakeUpstream::Ok("late"));
    finished.Notify();
  });
  const bool in_time = finished.WaitForNotificationWithTimeout(absl::Seconds(30));
  Unstall();
  business.join();
  ASSERT_TRUE(in_time) << "the Submit waited for the audit writer while holding its key's lock";
  ASSERT_TRUE(held.ok()) << held.status();
  EXPECT_EQ(held->result().response(), "late");

  // Nothing was left out of the audit log, and its chain is whole.
  ASSERT_TRUE(audit_->Flush().ok());
  EXPECT_EQ(audit_->lost(), 0u);
  EXPECT_EQ(AuditDecisions("held"), std::vector<std::string>{"committed"});
  EXPECT_EQ(AuditDecisions("third"), std::vector<std::string>{});
  auto verified = audit_->Verify();
  ASSERT_TRUE(verified.ok()) << verified.status();
  EXPECT_TRUE(verified->ok()) << verified->problem();
  EXPECT_EQ(verified->events_checked(), 3u);

  // The writer caught up: commands are taken again.
  EXPECT_TRUE(Submit(Cmd("fourth")).ok());
}

}  // namespace
}  // namespace eonce
