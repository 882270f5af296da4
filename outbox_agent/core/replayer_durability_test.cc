// What the replayer makes durable before the world outside can act on it, checked with
// power cuts on the crash file system through the real OutboxStore: a final state before
// a watcher hears of it, and the mark that a command was sent before the command leaves.
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/callback_batch.h"
#include "outbox_agent/core/replayer_test_fixture.h"
#include "outbox_agent/store/states.h"

namespace eonce {
namespace {

class ReplayerDurabilityTest : public ReplayerTest {
 protected:
  // The power goes out the moment a watcher is told of a final state: whatever was not
  // synced by then is lost. Returns the final states told, in order.
  std::shared_ptr<std::vector<OutboxState>> CutPowerWhenAFinalStateIsTold() {
    auto told = std::make_shared<std::vector<OutboxState>>();
    // The callback finds its own subscription through `self`, set once Subscribe returns
    // (nothing is published meanwhile).
    auto self = std::make_shared<std::weak_ptr<StateFeed::Subscription>>();
    std::shared_ptr<StateFeed::Subscription> watcher = feed_.Subscribe([this, told, self] {
      std::shared_ptr<StateFeed::Subscription> subscription = self->lock();
      v1::WatchEvent event;
      while (subscription != nullptr && subscription->Next(&event, 0)) {
        if (!IsFinal(event.state())) continue;
        told->push_back(event.state());
        fs_->Crash();
      }
    });
    *self = watcher;
    watchers_.push_back(watcher);
    return told;
  }

  // The restart after the power cut; the watchers go with the old process.
  void Restart() {
    for (const auto& watcher : watchers_) feed_.Unsubscribe(watcher);
    watchers_.clear();
    Open();
  }

  // An Outbox that asks the replayer which new lane heads it sends at once, as the agent's.
  std::unique_ptr<Outbox> OutboxWithOutlook() {
    return std::make_unique<Outbox>(*store_, *credential_, clock_, random_, CommandLimits(),
                                    &feed_, /*faults=*/nullptr, replayer_.get());
  }

  std::vector<std::shared_ptr<StateFeed::Subscription>> watchers_;
};

// The sidecar stores nothing for a refusal of its own (a policy denial, a key another
// command holds): had the final state been lost, the record would be SENDING again after
// the restart, reconciled (not seen), sent again and applied, after its producer was told
// it would not be.
TEST_F(ReplayerDurabilityTest, ARefusalAndAConflictAreDurableBeforeAnyoneIsTold) {
  Enqueue("denied", "a");
  Enqueue("conflict", "b");
  sidecar_.set_hold(true);
  ASSERT_EQ(replayer_->Pump(), 2);
  auto told = CutPowerWhenAFinalStateIsTold();
  {
    // One batch of answers: their moves go in one write, with one sync for both.
    CallbackBatch together;
    for (const std::string& id : sidecar_.held_ids()) {
      sidecar_.Release(id == "denied"
                           ? Fail(absl::StatusCode::kPermissionDenied, "POLICY_DENIED")
                           : Fail(absl::StatusCode::kAlreadyExists, "IDEMPOTENCY_CONFLICT"));
    }
  }
  ASSERT_EQ(told->size(), 2u);

  Restart();
  EXPECT_EQ(StateOf("denied"), v1::REJECTED);
  EXPECT_EQ(Get("denied").last_error().reason(), "POLICY_DENIED");
  EXPECT_EQ(StateOf("conflict"), v1::CONFLICT);
  sidecar_.set_hold(false);
  clock_.AdvanceMs(options_.claim_ttl_ms + options_.retry.max_backoff_ms);
  EXPECT_EQ(replayer_->Pump(), 0);
  EXPECT_EQ(sidecar_.submitted().size(), 2u);
}

// A record that expires before it was ever sent is known not to have happened, and its
// producer is told so. After a power cut it must not come back to be sent, as it would
// once the sidecar's retention grew.
TEST_F(ReplayerDurabilityTest, AnExpiryIsDurableBeforeAnyoneIsTold) {
  sidecar_.set_retention_ms(120'000);  // retention minus margin: 60 s
  Enqueue("old", "a");
  sidecar_.AnswerSubmit(Fail(absl::StatusCode::kUnavailable, "UPSTREAM_UNAVAILABLE", 61'000));
  replayer_->Pump();
  ASSERT_EQ(StateOf("old"), v1::RETRYABLE_FAILED);
  auto told = CutPowerWhenAFinalStateIsTold();
  clock_.AdvanceMs(61'000);
  replayer_->Pump();
  ASSERT_EQ(*told, std::vector<OutboxState>{v1::EXPIRED});

  Restart();
  EXPECT_EQ(StateOf("old"), v1::EXPIRED);
  sidecar_.set_retention_ms(7LL * 24 * 3600 * 1000);  // lengthened meanwhile
  clock_.AdvanceMs(options_.retry.max_backoff_ms);
  EXPECT_EQ(replayer_->Pump(), 0);
  EXPECT_EQ(sidecar_.submitted(), std::vector<std::string>{"old"});
}

// Once a command may have reached the sidecar, its record says so (ever_sent), whatever a
// power cut takes: an expired record that was sent may have happened, so it blocks its
// entity's later commands for an operator; one never sent would let them go.
TEST_F(ReplayerDurabilityTest, TheFirstSendIsOnRecordBeforeTheCommandLeaves) {
  sidecar_.set_retention_ms(120'000);  // retention minus margin: 60 s
  Enqueue("sent", "a");
  Enqueue("next", "a");
  sidecar_.set_hold(true);
  ASSERT_EQ(replayer_->Pump(), 1);
  ASSERT_EQ(sidecar_.held_ids(), std::vector<std::string>{"sent"});  // it has left
  fs_->Crash();  // and the power goes out
  sidecar_.Release(Fail(absl::StatusCode::kCancelled, nullptr));  // the call dies with it

  Open();
  const OutboxRecord sent = Get("sent");
  EXPECT_TRUE(sent.ever_sent());
  EXPECT_EQ(sent.state(), v1::UNKNOWN);  // reconciled before anything is sent again
  // The sidecar stays unreachable until the record is past its retention.
  clock_.AdvanceMs(61'000);
  replayer_->Pump();
  replayer_->Pump();
  EXPECT_EQ(StateOf("sent"), v1::EXPIRED);
  EXPECT_EQ(StateOf("next"), v1::QUEUED);
  EXPECT_EQ(sidecar_.submitted(), std::vector<std::string>{"sent"});
}

// The same for a record sent after a reconcile: one whose outcome is unknown but that
// carries no mark yet (a record of an earlier version) is marked durably as it goes.
TEST_F(ReplayerDurabilityTest, ASendAfterAReconcileIsOnRecordBeforeTheCommandLeaves) {
  Enqueue("old", "a");
  ASSERT_TRUE(store_->Mutate("old", "as an earlier version left it", [](OutboxRecord* r) {
                       r->set_state(v1::UNKNOWN);
                       r->set_ever_sent(false);
                       return absl::OkStatus();
                     }, /*sync=*/true).ok());
  sidecar_.set_hold(true);
  ASSERT_EQ(replayer_->Pump(), 1);  // reconciled (not seen), then sent
  ASSERT_EQ(sidecar_.reconciled(), std::vector<std::string>{"old"});
  ASSERT_EQ(sidecar_.held_ids(), std::vector<std::string>{"old"});
  fs_->Crash();
  sidecar_.Release(Fail(absl::StatusCode::kCancelled, nullptr));

  Open();
  EXPECT_TRUE(Get("old").ever_sent());
}

// The drain's cost: the claims of one round that first mark their records share one sync,
// and the claims of records sent before (their mark is durable already) need none.
TEST_F(ReplayerDurabilityTest, TheFirstClaimsOfOneRoundShareOneSyncAndLaterClaimsNone) {
  for (const char* id : {"c1", "c2", "c3", "c4", "c5"}) Enqueue(id, id);
  for (int i = 0; i < 5; ++i) {
    sidecar_.AnswerSubmit(Fail(absl::StatusCode::kUnavailable, "UPSTREAM_UNAVAILABLE", 0));
  }
  auto syncs = std::make_shared<std::atomic<int>>(0);
  fs_->set_before_wal_sync([syncs] { ++*syncs; });
  ASSERT_EQ(replayer_->Pump(), 5);
  EXPECT_EQ(*syncs, 1);
  EXPECT_EQ(StateOf("c3"), v1::RETRYABLE_FAILED);

  *syncs = 0;
  clock_.AdvanceMs(options_.retry.max_backoff_ms);
  ASSERT_EQ(replayer_->Pump(), 5);
  EXPECT_EQ(*syncs, 0);  // claimed again and acked: nothing that needs a sync
  EXPECT_EQ(StateOf("c3"), v1::ACKED);
  fs_->set_before_wal_sync(nullptr);
}

// A command that heads its lane while the replayer would send it at once carries its mark
// in its Enqueue's synced write, so its claim needs no sync: one fsync fewer between the
// producer's yes and the command leaving. One enqueued behind it is marked by its claim.
TEST_F(ReplayerDurabilityTest, ALaneHeadSentAtOnceIsMarkedByItsEnqueueAndItsClaimIsNotSynced) {
  std::unique_ptr<Outbox> outbox = OutboxWithOutlook();
  auto enqueue = [&](const std::string& id, const std::string& entity) {
    auto r = outbox->Enqueue(CommandOf(id, entity));
    ASSERT_TRUE(r.ok()) << r.status();
  };
  enqueue("head", "a");
  enqueue("behind", "a");
  outbox.reset();
  fs_->Crash();  // the power goes out: what the Enqueues synced stays
  Open();
  EXPECT_TRUE(Get("head").ever_sent());
  EXPECT_FALSE(Get("behind").ever_sent());

  auto syncs = std::make_shared<std::atomic<int>>(0);
  fs_->set_before_wal_sync([syncs] { ++*syncs; });
  ASSERT_EQ(replayer_->Pump(), 1);
  EXPECT_EQ(*syncs, 0);  // the head's claim: its mark is durable already
  EXPECT_EQ(StateOf("head"), v1::ACKED);
  ASSERT_EQ(replayer_->Pump(), 1);
  EXPECT_EQ(*syncs, 1);  // the next one's claim marks it: synced before it leaves
  EXPECT_EQ(StateOf("behind"), v1::ACKED);
  fs_->set_before_wal_sync(nullptr);
  EXPECT_EQ(sidecar_.submitted(), (std::vector<std::string>{"head", "behind"}));
}

// No mark while the command would wait anyway: the credential revoked, every attempt slot
// taken, or its route's retention unknown. Such a record, if it expires before it is ever
// sent, is known not to have happened and lets its entity's next command go.
TEST_F(ReplayerDurabilityTest, NoMarkAtEnqueueWhileTheCommandWouldWait) {
  std::unique_ptr<Outbox> outbox = OutboxWithOutlook();
  auto enqueue = [&](const std::string& id, const std::string& method) {
    auto r = outbox->Enqueue(CommandOf(id, id, "", method));
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() && r->record().ever_sent();
  };
  const std::string transfer = "/eonce.ledger.v1.Ledger/Transfer";
  EXPECT_TRUE(enqueue("ready", transfer));
  sidecar_.set_retention_unknown("/eonce.ledger.v1.Ledger/OpenAccount");
  EXPECT_FALSE(enqueue("no-retention", "/eonce.ledger.v1.Ledger/OpenAccount"));
  ASSERT_TRUE(credential_->Set(1, /*revoked=*/true).ok());
  EXPECT_FALSE(enqueue("revoked", transfer));
  ASSERT_TRUE(credential_->Set(2, false).ok());
  sidecar_.set_hold(true);
  for (int i = 0; i < options_.max_in_flight; ++i) {
    Enqueue(absl::StrCat("fill-", i), absl::StrCat("f", i));
  }
  while (replayer_->in_flight() < options_.max_in_flight && replayer_->Pump() > 0) {
  }
  ASSERT_EQ(replayer_->in_flight(), options_.max_in_flight);
  EXPECT_FALSE(enqueue("no-slot", transfer));
  EXPECT_FALSE(Get("no-slot").ever_sent());
}

// What a mark costs when no send follows it: the agent dies right after the Enqueue and the
// sidecar stays away past the command's retention. Whether it was sent cannot be told from
// the mark alone, so the record waits for an operator and holds its entity's next command.
TEST_F(ReplayerDurabilityTest, AMarkedHeadThatExpiresUnsentWaitsForAnOperator) {
  sidecar_.set_retention_ms(120'000);  // retention minus margin: 60 s
  ASSERT_TRUE(OutboxWithOutlook()->Enqueue(CommandOf("marked", "a")).ok());
  Enqueue("next", "a");
  fs_->Crash();
  Open();
  clock_.AdvanceMs(61'000);
  replayer_->Pump();
  replayer_->Pump();
  EXPECT_EQ(StateOf("marked"), v1::EXPIRED);
  EXPECT_TRUE(AwaitsOperator(Get("marked")));
  EXPECT_EQ(StateOf("next"), v1::QUEUED);
  EXPECT_TRUE(sidecar_.submitted().empty());

  // The same with the agent up: the credential is revoked between the Enqueue and the
  // send, and renewed only after the command's retention.
  ASSERT_TRUE(OutboxWithOutlook()->Enqueue(CommandOf("marked-then-revoked", "b")).ok());
  ASSERT_TRUE(credential_->Set(1, /*revoked=*/true).ok());
  EXPECT_EQ(replayer_->Pump(), 0);
  clock_.AdvanceMs(61'000);
  ASSERT_TRUE(credential_->Set(2, false).ok());
  replayer_->Pump();
  EXPECT_EQ(StateOf("marked-then-revoked"), v1::EXPIRED);
  EXPECT_TRUE(AwaitsOperator(Get("marked-then-revoked")));
  EXPECT_TRUE(sidecar_.submitted().empty());
}

}  // namespace
}  // namespace eonce
