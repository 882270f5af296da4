#include "outbox_agent/core/state_feed.h"

#include <memory>

#include "gtest/gtest.h"

namespace eonce {
namespace {

v1::WatchEvent EventOf(const std::string& command_id, v1::OutboxState state) {
  v1::WatchEvent event;
  event.set_command_id(command_id);
  event.set_state(state);
  return event;
}

// A subscriber that names states is queued, and woken, for those alone; one that names
// none hears of every state.
TEST(StateFeedTest, ASubscriberHearsOfTheStatesItNamesAlone) {
  StateFeed feed;
  int acked_wakes = 0, every_wakes = 0;
  auto acked = feed.Subscribe([&] { ++acked_wakes; }, StateFeed::BitOf(v1::ACKED));
  auto every = feed.Subscribe([&] { ++every_wakes; });
  ASSERT_NE(acked, nullptr);
  ASSERT_NE(every, nullptr);
  feed.Publish(EventOf("c1", v1::QUEUED));
  feed.Publish(EventOf("c1", v1::SENDING));
  feed.Publish(EventOf("c1", v1::ACKED));
  EXPECT_EQ(acked_wakes, 1);
  EXPECT_EQ(every_wakes, 3);
  v1::WatchEvent event;
  ASSERT_TRUE(acked->Next(&event, 0));
  EXPECT_EQ(event.state(), v1::ACKED);
  EXPECT_FALSE(acked->Next(&event, 0)) << "a notice of a state it did not name";
  for (v1::OutboxState state : {v1::QUEUED, v1::SENDING, v1::ACKED}) {
    ASSERT_TRUE(every->Next(&event, 0));
    EXPECT_EQ(event.state(), state);
  }
}

// Wants says whether a notice would reach anyone: the union of the subscribers' states,
// nothing once they are gone.
TEST(StateFeedTest, WantsIsTheUnionOfTheSubscribersStates) {
  StateFeed feed;
  EXPECT_FALSE(feed.Wants(v1::ACKED));
  auto acked = feed.Subscribe(nullptr, StateFeed::BitOf(v1::ACKED));
  auto failed = feed.Subscribe(nullptr, StateFeed::BitOf(v1::REJECTED) |
                                            StateFeed::BitOf(v1::DEAD_LETTERED));
  EXPECT_TRUE(feed.Wants(v1::ACKED));
  EXPECT_TRUE(feed.Wants(v1::DEAD_LETTERED));
  EXPECT_FALSE(feed.Wants(v1::SENDING));
  feed.Unsubscribe(acked);
  EXPECT_FALSE(feed.Wants(v1::ACKED));
  EXPECT_TRUE(feed.Wants(v1::REJECTED));
  auto every = feed.Subscribe();
  EXPECT_TRUE(feed.Wants(v1::SENDING));
  feed.Unsubscribe(every);
  feed.Unsubscribe(failed);
  EXPECT_FALSE(feed.Wants(v1::REJECTED));
}

// Only the notices it hears of fill a subscriber's bounded queue: a watcher of final
// states is not cut off by the steps of many commands.
TEST(StateFeedTest, NoticesASubscriberDoesNotHearOfNeverFillItsQueue) {
  StateFeed feed(/*max_queue=*/2);
  auto acked = feed.Subscribe(nullptr, StateFeed::BitOf(v1::ACKED));
  auto every = feed.Subscribe();
  for (int i = 0; i < 10; ++i) feed.Publish(EventOf("c", v1::SENDING));
  EXPECT_FALSE(acked->cut_off());
  EXPECT_TRUE(every->cut_off());
  feed.Publish(EventOf("c", v1::ACKED));
  v1::WatchEvent event;
  ASSERT_TRUE(acked->Next(&event, 0));
  EXPECT_EQ(event.state(), v1::ACKED);
}

}  // namespace
}  // namespace eonce
