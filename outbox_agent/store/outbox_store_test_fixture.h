// The OutboxStore's test fixture: a real RocksDB on the crash file system (opening the
// store again is a crash that loses what was not synced) and a manual clock.
#ifndef EONCE_OUTBOX_AGENT_STORE_OUTBOX_STORE_TEST_FIXTURE_H_
#define EONCE_OUTBOX_AGENT_STORE_OUTBOX_STORE_TEST_FIXTURE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "common/command/command.h"
#include "common/store/crash_fs.h"
#include "gtest/gtest.h"
#include "outbox_agent/store/outbox_store.h"
#include "tests/util/crash.h"
#include "tests/util/temp_dir.h"

namespace eonce {

class OutboxStoreTest : public ::testing::Test {
 protected:
  OutboxStoreTest() : dir_(testing::FreshDir("outbox")) { Open(); }
  // A committer still held when a test ends (an assertion returned early) is let go
  // before the store closes, which waits for it.
  ~OutboxStoreTest() override {
    for (auto& release : held_) {
      if (!release->HasBeenNotified()) release->Notify();
    }
  }

  // Opens the store; when it is open already, first a crash: whatever was not synced is
  // lost (the crash file system), so a synced write made unsynced fails a test.
  void Open(OutboxStoreOptions options = {}) {
    store_.reset();
    testing::CrashStore(*fs_, rocks_);
    StoreOptions store_options;
    store_options.env = fs_->env();
    auto rocks = RocksStore::Open(dir_, OutboxStore::ColumnFamilies(filters_), store_options);
    ASSERT_TRUE(rocks.ok()) << rocks.status();
    rocks_ = std::move(*rocks);
    store_ = std::make_unique<OutboxStore>(*rocks_, clock_, options);
  }

  v1::Command Cmd(const std::string& id, const std::string& entity, const std::string& req = "r") {
    v1::Command c;
    c.set_command_id(id);
    c.set_target_method("/eonce.ledger.v1.Ledger/Transfer");
    c.set_request(req);
    c.mutable_entity()->set_type("account");
    c.mutable_entity()->set_id(entity);
    c.set_idempotency_key(DeriveIdempotencyKey(c));
    FillPayloadHash(&c);
    return c;
  }

  absl::Status Move(const std::string& id, OutboxState to) {
    return store_->Mutate(id, "test", [&](OutboxRecord* r) {
                     r->set_state(to);
                     return absl::OkStatus();
                   }, false).status();
  }

  std::vector<std::string> Due() { return *store_->Due(clock_.NowMs(), 100); }

  // InsertWhenDurable, waited for, without the MarkDurable that Insert adds.
  absl::StatusOr<OutboxStore::Inserted> InsertNotMarked(const v1::Command& command) {
    absl::Notification answered;
    absl::StatusOr<OutboxStore::Inserted> result = absl::InternalError("no answer");
    store_->InsertWhenDurable(command, [&](absl::StatusOr<OutboxStore::Inserted> r) {
      result = std::move(r);
      answered.Notify();
    });
    answered.WaitForNotification();
    return result;
  }

  // Holds the store's committer thread in a callback until the returned notification is
  // given (at the latest when the test ends): what is queued meanwhile waits, unwritten.
  std::shared_ptr<absl::Notification> HoldCommitter() {
    auto release = std::make_shared<absl::Notification>();
    held_.push_back(release);
    auto holding = std::make_shared<absl::Notification>();
    EXPECT_TRUE(Move("held", v1::RETRYABLE_FAILED).ok());  // unsynced: the wait queues
    rocks_->WhenDurable([release, holding](absl::Status) {
      holding->Notify();
      release->WaitForNotification();
    });
    holding->WaitForNotification();
    return release;
  }

  std::vector<std::shared_ptr<absl::Notification>> held_;
  std::string dir_;
  std::shared_ptr<CrashFileSystem> fs_ = NewCrashFileSystem();
  ManualClock clock_;
  OutboxStore::Filters filters_{clock_};
  std::unique_ptr<RocksStore> rocks_;
  std::unique_ptr<OutboxStore> store_;
};

// A change that moves the record to `to` (and its next attempt to `next_ms`, when set).
inline OutboxStore::Change SetState(const std::string& id, OutboxState to, int64_t next_ms = 0) {
  return {id, "test", [to, next_ms](OutboxRecord* r) {
            r->set_state(to);
            if (next_ms > 0) r->set_next_attempt_at_ms(next_ms);
            return absl::OkStatus();
          }};
}

}  // namespace eonce

#endif  // EONCE_OUTBOX_AGENT_STORE_OUTBOX_STORE_TEST_FIXTURE_H_
