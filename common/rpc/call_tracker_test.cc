// CallTracker: a closing tracker refuses new calls, cancels those in flight, and returns
// only once every ticket is gone.
#include "common/rpc/call_tracker.h"

#include <memory>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace eonce {
namespace {

struct CallState {
  CallTracker::Ticket ticket;
  grpc::ClientContext context;
};

TEST(CallTrackerTest, ClosingWaitsForEveryTicketAndRefusesNewCalls) {
  CallTracker tracker;
  auto first = std::make_shared<CallState>();
  auto second = std::make_shared<CallState>();
  ASSERT_TRUE(
      tracker.Start(first->ticket, std::shared_ptr<grpc::ClientContext>(first, &first->context)));
  ASSERT_TRUE(tracker.Start(second->ticket,
                            std::shared_ptr<grpc::ClientContext>(second, &second->context)));
  second.reset();  // this call's state is gone already
  absl::Notification closed;
  std::thread closer([&] {
    tracker.CloseAndWait();
    closed.Notify();
  });
  EXPECT_FALSE(closed.WaitForNotificationWithTimeout(absl::Milliseconds(200)))
      << "closed while a call's state was alive";
  auto late = std::make_shared<CallState>();
  // Closing (the closer has begun, or begins now): a new call is refused, and its ticket
  // holds no place.
  while (tracker.Start(late->ticket,
                       std::shared_ptr<grpc::ClientContext>(late, &late->context))) {
    late = std::make_shared<CallState>();  // started before the close: its ticket goes
    std::this_thread::yield();
  }
  late.reset();
  EXPECT_FALSE(closed.HasBeenNotified());
  first.reset();
  EXPECT_TRUE(closed.WaitForNotificationWithTimeout(absl::Seconds(10)));
  closer.join();
}

TEST(CallTrackerTest, ANewTrackerClosesAtOnce) {
  CallTracker tracker;
  tracker.CloseAndWait();
  CallState state;
  EXPECT_FALSE(tracker.Start(state.ticket, std::weak_ptr<grpc::ClientContext>()));
}

}  // namespace
}  // namespace eonce
