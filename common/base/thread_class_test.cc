#include "common/base/thread_class.h"

#include <thread>

#include "gtest/gtest.h"

namespace eonce {
namespace {

#ifdef __linux__
TEST(ThreadClassTest, OnlyTheCallingThreadBecomesBatchWork) {
  ASSERT_FALSE(IsBatchThread());
  bool batch_inside = false;
  bool batch_before = true;
  absl::Status status;
  std::thread worker([&] {
    batch_before = IsBatchThread();
    status = AsBatchThread();
    batch_inside = IsBatchThread();
  });
  worker.join();
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_FALSE(batch_before);
  EXPECT_TRUE(batch_inside);
  // The process's other threads, this one included, keep their class.
  EXPECT_FALSE(IsBatchThread());
  bool batch_in_next = true;
  std::thread next([&] { batch_in_next = IsBatchThread(); });
  next.join();
  EXPECT_FALSE(batch_in_next);
}
#else
TEST(ThreadClassTest, SaysWhereThereIsNoBatchClass) {
  EXPECT_EQ(AsBatchThread().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(IsBatchThread());
}
#endif

}  // namespace
}  // namespace eonce
