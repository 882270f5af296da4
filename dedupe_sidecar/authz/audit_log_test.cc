// AuditLog's hand-off to its writer: events appended together share one store write,
// and nothing that must see the events (Flush, Query, the destructor) waits for the
// writer's linger.
#include "dedupe_sidecar/authz/audit_log.h"

#include <chrono>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/base/status.h"
#include "common/base/thread_class.h"
#include "gtest/gtest.h"
#include "tests/util/temp_dir.h"

namespace eonce {
namespace {

// Long enough that a test relying on it running out would fail by the 30 s bound below,
// so every check here can only pass if the linger is cut short or shared.
constexpr absl::Duration kLongLinger = absl::Seconds(60);
constexpr auto kBound = std::chrono::seconds(30);

class AuditLogTest : public ::testing::Test {
 protected:
  void Open(absl::Duration linger, size_t max_queue = 4096,
            std::function<void()> before_write = nullptr) {
    audit_.reset();
    rocks_.reset();
    std::vector<ColumnFamilySpec> families = RecordStore::ColumnFamilies(filters_);
    for (auto& f : AuditLog::ColumnFamilies(filters_)) families.push_back(f);
    auto rocks = RocksStore::Open(dir_, families, StoreOptions());
    ASSERT_TRUE(rocks.ok()) << rocks.status();
    rocks_ = std::move(*rocks);
    audit_ = std::make_unique<AuditLog>(*rocks_, clock_, 24LL * 3600 * 1000, max_queue, linger,
                                        std::move(before_write));
  }

  static v1::AuditEvent Event(int i) {
    v1::AuditEvent event;
    event.set_decision("committed");
    event.set_tenant("acme");
    event.set_command_id(absl::StrCat("cmd-", i));
    event.set_idempotency_key(absl::StrCat("key-", i));
    return event;
  }

  size_t Found(int i) {
    v1::QueryAuditRequest request;
    request.set_command_id(absl::StrCat("cmd-", i));
    auto events = audit_->Query("acme", request);
    EXPECT_TRUE(events.ok()) << events.status();
    return events.ok() ? events->size() : 0;
  }

  std::string dir_ = testing::FreshDir("audit");
  ManualClock clock_;
  RecordStoreFilters filters_{clock_};
  std::unique_ptr<RocksStore> rocks_;
  std::unique_ptr<AuditLog> audit_;
};

TEST_F(AuditLogTest, EventsAppendedTogetherShareOneWriteAndFlushCutsTheLingerShort) {
  Open(kLongLinger);
  const auto began = std::chrono::steady_clock::now();
  // Paced, so that the writer is awake and lingering while the later events come.
  for (int i = 0; i < 20; ++i) {
    audit_->Append(Event(i));
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_TRUE(audit_->Flush().ok());
  EXPECT_LT(std::chrono::steady_clock::now() - began, kBound) << "Flush waited for the linger";
  EXPECT_EQ(audit_->appended(), 20u);
  // The first event woke the writer, which lingered; the others joined it and did not
  // wake it again.
  EXPECT_EQ(audit_->writes(), 1u);
  EXPECT_EQ(Found(0), 1u);
  EXPECT_EQ(Found(19), 1u);
  auto verified = audit_->Verify();
  ASSERT_TRUE(verified.ok()) << verified.status();
  EXPECT_TRUE(verified->ok()) << verified->problem();
  EXPECT_EQ(verified->events_checked(), audit_->appended());
}

TEST_F(AuditLogTest, AFullBatchIsWrittenWithoutWaitingForTheLinger) {
  Open(kLongLinger);
  const auto began = std::chrono::steady_clock::now();
  for (int i = 0; i < 600; ++i) audit_->Append(Event(i));
  // Nobody flushes: full batches of 256 go on their own.
  while (audit_->writes() < 2 && std::chrono::steady_clock::now() - began < kBound) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_GE(audit_->writes(), 2u) << "full batches waited for the linger";
}

// Append never waits, whatever the writer does (it is called under the Deduper's key
// locks): room is reserved before a decision and a reservation always finds its room; an
// event without one that finds the queue full is counted and left out (the error log
// keeps it), and the chain stays whole.
TEST_F(AuditLogTest, AppendNeverWaitsForAStalledWriter) {
  absl::Notification writing, unstall;
  Open(absl::ZeroDuration(), /*max_queue=*/3, [&] {
    if (!writing.HasBeenNotified()) writing.Notify();
    unstall.WaitForNotification();
  });
  audit_->Append(Event(0));
  writing.WaitForNotification();  // the writer took event 0 and stalls
  absl::Notification done;
  std::thread appender([&] {
    absl::StatusOr<AuditLog::Reservation> room = audit_->Reserve(1);
    EXPECT_TRUE(room.ok()) << room.status();
    audit_->Append(Event(1));
    audit_->Append(Event(2));  // with the room reserved, the queue is full
    absl::StatusOr<AuditLog::Reservation> none = audit_->Reserve(1);
    EXPECT_EQ(none.status().code(), absl::StatusCode::kResourceExhausted);
    EXPECT_EQ(ReasonOf(none.status()), "AUDIT_BACKLOG");
    audit_->Append(Event(3));  // no room and none reserved: left out, not waited for
    EXPECT_EQ(audit_->lost(), 1u);
    if (room.ok()) audit_->Append(Event(4), &*room);
    EXPECT_EQ(audit_->lost(), 1u);
    audit_->Append(Event(5));  // the queue itself is full now
    EXPECT_EQ(audit_->lost(), 2u);
    done.Notify();
  });
  const bool finished = done.WaitForNotificationWithTimeout(absl::Seconds(30));
  unstall.Notify();
  appender.join();
  ASSERT_TRUE(finished) << "an Append waited for the stalled writer";
  ASSERT_TRUE(audit_->Flush().ok());
  EXPECT_EQ(audit_->appended(), 4u);
  EXPECT_EQ(Found(3), 0u);
  EXPECT_EQ(Found(4), 1u);
  EXPECT_EQ(Found(5), 0u);
  auto verified = audit_->Verify();
  ASSERT_TRUE(verified.ok()) << verified.status();
  EXPECT_TRUE(verified->ok()) << verified->problem();
  EXPECT_EQ(verified->events_checked(), 4u);
  // The room is free again once the writer caught up.
  EXPECT_TRUE(audit_->Reserve(3).ok());
}

// A Submit still in flight when its sidecar goes down (a crash, a shutdown) holds its
// room past the log's end: giving it back then touches nothing of the log.
TEST_F(AuditLogTest, AReservationMayOutliveItsLog) {
  Open(absl::ZeroDuration());
  absl::StatusOr<AuditLog::Reservation> room = audit_->Reserve(1);
  ASSERT_TRUE(room.ok()) << room.status();
  AuditLog::Reservation kept = *std::move(room);
  audit_.reset();
  kept.Release();  // on a log that is gone
  Open(absl::ZeroDuration(), /*max_queue=*/1);
  EXPECT_TRUE(audit_->Reserve(1).ok());
}

TEST_F(AuditLogTest, TheDestructorWritesWhatIsQueuedWithoutWaitingForTheLinger) {
  Open(kLongLinger);
  for (int i = 0; i < 10; ++i) audit_->Append(Event(i));
  const auto began = std::chrono::steady_clock::now();
  audit_.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - began, kBound);
  Open(kLongLinger);
  EXPECT_EQ(audit_->appended(), 10u) << "the reopened log continues after the last event";
  EXPECT_EQ(Found(9), 1u);
}

#ifdef __linux__
TEST_F(AuditLogTest, TheWriterRunsAsBatchWorkSoThatItsTimerNeverPreemptsARequest) {
  Open(kLongLinger);
  EXPECT_TRUE(audit_->writer_runs_as_batch());
  // The thread that made the log keeps its class.
  EXPECT_FALSE(IsBatchThread());
}
#endif

TEST_F(AuditLogTest, WithoutALingerEventsStillArriveInOrder) {
  Open(absl::ZeroDuration());
  for (int i = 0; i < 50; ++i) audit_->Append(Event(i));
  ASSERT_TRUE(audit_->Flush().ok());
  for (int i = 0; i < 50; ++i) EXPECT_EQ(Found(i), 1u) << i;
  auto verified = audit_->Verify();
  ASSERT_TRUE(verified.ok()) << verified.status();
  EXPECT_TRUE(verified->ok()) << verified->problem();
  EXPECT_EQ(verified->events_checked(), audit_->appended());
}

}  // namespace
}  // namespace eonce
