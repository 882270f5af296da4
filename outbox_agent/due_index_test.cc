// The in-memory due queue answers in due-time order, with one entry per command.
#include "outbox_agent/due_index.h"

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

}  // namespace
}  // namespace eonce
