// The in-memory due queue answers in due-time order, with one entry per command.
#include "outbox_agent/store/due_index.h"

#include "gtest/gtest.h"

namespace eonce {
namespace {

TEST(DueIndexTest, DueByIsEarliestFirstUpToNowAndTheLimit) {
  DueIndex due;
  due.Set("c", 300);
  due.Set("a", 100);
  due.Set("b", 200);
  EXPECT_EQ(due.DueBy(99, 10), std::vector<std::string>{});
  EXPECT_EQ(due.DueBy(200, 10), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(due.DueBy(1000, 2), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(due.Earliest(), 100);
}

TEST(DueIndexTest, SettingAgainMovesTheEntryAndRemoveDropsIt) {
  DueIndex due;
  due.Set("a", 100);
  due.Set("b", 200);
  due.Set("a", 500);  // a retry later: one entry, at its new time
  EXPECT_EQ(due.size(), 2u);
  EXPECT_EQ(due.DueBy(1000, 10), (std::vector<std::string>{"b", "a"}));
  due.Remove("b");
  due.Remove("b");  // twice: no harm
  EXPECT_EQ(due.DueBy(1000, 10), std::vector<std::string>{"a"});
  due.Remove("a");
  EXPECT_EQ(due.Earliest(), std::nullopt);
  EXPECT_EQ(due.size(), 0u);
}

TEST(DueIndexTest, AHeldEntryWaitsForItsReleaseWithTheLastTimeItWasGiven) {
  DueIndex due;
  due.Set("a", 5);
  due.Hold("a");
  due.Hold("b");
  EXPECT_TRUE(due.DueBy(100, 10).empty());
  due.Set("b", 7);
  due.Set("a", 9);
  EXPECT_TRUE(due.DueBy(100, 10).empty());
  due.Release("b");
  EXPECT_EQ(due.DueBy(100, 10), (std::vector<std::string>{"b"}));
  due.Remove("a");
  due.Release("a");  // removed while held: not due
  EXPECT_EQ(due.DueBy(100, 10), (std::vector<std::string>{"b"}));
  due.Hold("c");
  due.Set("c", 1);
  due.Release("c");
  EXPECT_EQ(due.DueBy(100, 10), (std::vector<std::string>{"c", "b"}));
  due.Release("c");  // not held: nothing changes
  EXPECT_EQ(due.DueBy(100, 10), (std::vector<std::string>{"c", "b"}));
}

TEST(DueIndexTest, PostponeOnlyDelaysAnEntryThatIsInTheQueue) {
  DueIndex due;
  due.Set("a", 5);
  due.Set("b", 6);
  due.Postpone("a", 50);
  EXPECT_EQ(due.DueBy(10, 10), (std::vector<std::string>{"b"}));
  EXPECT_EQ(due.Earliest(), 6);
  due.Postpone("a", 20);  // never earlier
  EXPECT_EQ(due.DueBy(49, 10), (std::vector<std::string>{"b"}));
  due.Postpone("gone", 50);  // not in the queue: stays out
  due.Hold("h");
  due.Postpone("h", 50);  // held: stays held
  EXPECT_EQ(due.DueBy(100, 10), (std::vector<std::string>{"b", "a"}));
  due.Set("a", 1);  // a later write wins
  EXPECT_EQ(due.DueBy(10, 10), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(due.size(), 2u);
}

}  // namespace
}  // namespace eonce
