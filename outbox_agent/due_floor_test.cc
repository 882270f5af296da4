// The floor of the due index never passes a live entry: not one the scan saw, not one
// written while it ran, not one whose write was still in flight when it began.
#include "outbox_agent/due_floor.h"

#include "gtest/gtest.h"

namespace eonce {
namespace {

TEST(DueFloorTest, RisesToTheEarliestLiveEntryTheScanSaw) {
  DueFloor floor;
  EXPECT_EQ(floor.BeginScan(), 0);
  floor.EndScan(/*first_live_ms=*/500, /*scanned_to_ms=*/1000);
  EXPECT_EQ(floor.BeginScan(), 500);
  // Nothing live before the end of the scan: up to where it looked.
  floor.EndScan(DueFloor::kNone, 1200);
  EXPECT_EQ(floor.floor(), 1200);
}

TEST(DueFloorTest, AnEarlierEntryWrittenLaterLowersIt) {
  DueFloor floor;
  floor.BeginScan();
  floor.EndScan(DueFloor::kNone, 1000);
  // The next command of a lane becomes due at its old time, far below the floor.
  floor.Writing(10);
  floor.Written(10);
  EXPECT_EQ(floor.BeginScan(), 10);
}

TEST(DueFloorTest, AnEntryWrittenDuringTheScanHoldsItDown) {
  DueFloor floor;
  EXPECT_EQ(floor.BeginScan(), 0);
  floor.Writing(300);  // the scan's iterator may not see it
  floor.Written(300);
  floor.EndScan(/*first_live_ms=*/900, 1000);
  EXPECT_EQ(floor.floor(), 300);
}

TEST(DueFloorTest, AWriteInFlightWhenTheScanBeganHoldsItDown) {
  DueFloor floor;
  floor.Writing(200);  // announced, not yet in the store
  EXPECT_EQ(floor.BeginScan(), 0);
  floor.EndScan(/*first_live_ms=*/900, 1000);
  EXPECT_EQ(floor.floor(), 200);
  floor.Written(200);
  EXPECT_EQ(floor.BeginScan(), 200);
  floor.EndScan(900, 1000);
  EXPECT_EQ(floor.floor(), 900);
}

}  // namespace
}  // namespace eonce
