// The in-memory lanes answer as the lanes column family did: in enqueue order, per lane,
// each command apart from the one asking.
#include "outbox_agent/store/lane_index.h"

#include "gtest/gtest.h"

namespace eonce {
namespace {

TEST(LaneIndexTest, TheHeadIsTheEarliestEntryOfItsLaneAlone) {
  LaneIndex lanes;
  lanes.Add("account/a", 5, "a5");
  lanes.Add("account/a", 2, "a2");
  lanes.Add("account/b", 1, "b1");
  EXPECT_TRUE(lanes.IsHead("account/a", 2));
  EXPECT_FALSE(lanes.IsHead("account/a", 5));
  EXPECT_TRUE(lanes.IsHead("account/b", 1));
  // A command that holds no entry yet is the head only of an empty lane or before it.
  EXPECT_TRUE(lanes.IsHead("account/c", 9));
  EXPECT_FALSE(lanes.IsHead("account/a", 7));
  EXPECT_TRUE(lanes.IsHead("account/a", 1));
}

TEST(LaneIndexTest, FirstOtherSkipsTheAskingCommandOnly) {
  LaneIndex lanes;
  EXPECT_EQ(lanes.FirstOther("account/a", 1), std::nullopt);
  lanes.Add("account/a", 1, "a1");
  EXPECT_EQ(lanes.FirstOther("account/a", 1), std::nullopt);
  EXPECT_EQ(lanes.FirstOther("account/a", 9), "a1");
  lanes.Add("account/a", 3, "a3");
  lanes.Add("account/a", 2, "a2");
  EXPECT_EQ(lanes.FirstOther("account/a", 1), "a2");
  EXPECT_EQ(lanes.FirstOther("account/a", 2), "a1");
  EXPECT_EQ(lanes.FirstOther("account/b", 1), std::nullopt);
}

TEST(LaneIndexTest, RemovingAnEntryPromotesTheNextAndForgetsItsLane) {
  LaneIndex lanes;
  lanes.Add("account/a", 1, "a1");
  lanes.Add("account/a", 2, "a2");
  EXPECT_EQ(lanes.LaneOf("a1"), "account/a");
  lanes.Remove("account/a", 1);
  EXPECT_EQ(lanes.LaneOf("a1"), std::nullopt);
  EXPECT_TRUE(lanes.IsHead("account/a", 2));
  lanes.Remove("account/a", 1);  // twice: nothing more happens
  lanes.Remove("account/z", 1);
  EXPECT_EQ(lanes.size(), 1u);
  lanes.Remove("account/a", 2);
  EXPECT_EQ(lanes.size(), 0u);
  EXPECT_EQ(lanes.FirstOther("account/a", 5), std::nullopt);
}

}  // namespace
}  // namespace eonce
