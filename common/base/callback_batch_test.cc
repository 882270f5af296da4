#include "common/base/callback_batch.h"

#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace eonce {
namespace {

// A stand-in for a component that writes what its callbacks queue: one flush, many items.
struct Writer {
  std::vector<std::string> queued;
  std::vector<std::vector<std::string>> writes;

  void Add(std::string item) {
    queued.push_back(std::move(item));
    if (!CallbackBatch::Defer(this, [this] { Flush(); })) Flush();
  }
  void Flush() {
    if (!queued.empty()) writes.push_back(std::move(queued));
    queued.clear();
  }
};

TEST(CallbackBatchTest, OutsideABatchEachCallbackDoesItsWorkAtOnce) {
  Writer writer;
  writer.Add("a");
  writer.Add("b");
  EXPECT_EQ(writer.writes, (std::vector<std::vector<std::string>>{{"a"}, {"b"}}));
}

TEST(CallbackBatchTest, InsideABatchTheWorkIsDoneOnceWhenItCloses) {
  Writer writer;
  {
    CallbackBatch batch;
    writer.Add("a");
    writer.Add("b");
    writer.Add("c");
    EXPECT_TRUE(writer.writes.empty()) << "nothing is written before the batch closes";
  }
  EXPECT_EQ(writer.writes, (std::vector<std::vector<std::string>>{{"a", "b", "c"}}));
}

TEST(CallbackBatchTest, EachOwnerFlushesOnceInTheOrderItFirstDeferred) {
  Writer first, second;
  {
    CallbackBatch batch;
    second.Add("x");
    first.Add("a");
    second.Add("y");
  }
  EXPECT_EQ(first.writes, (std::vector<std::vector<std::string>>{{"a"}}));
  EXPECT_EQ(second.writes, (std::vector<std::vector<std::string>>{{"x", "y"}}));
}

TEST(CallbackBatchTest, OnlyTheOutermostBatchFlushes) {
  Writer writer;
  {
    CallbackBatch outer;
    {
      CallbackBatch inner;
      writer.Add("a");
    }
    EXPECT_TRUE(writer.writes.empty());
    writer.Add("b");
  }
  EXPECT_EQ(writer.writes, (std::vector<std::vector<std::string>>{{"a", "b"}}));
}

TEST(CallbackBatchTest, WorkDeferredByAFlushRunsBeforeTheBatchCloses) {
  Writer writer;
  bool chained = false;
  {
    CallbackBatch batch;
    CallbackBatch::Defer(&chained, [&] {
      chained = true;
      writer.Add("late");  // deferred again, inside the closing batch
    });
  }
  EXPECT_TRUE(chained);
  EXPECT_EQ(writer.writes, (std::vector<std::vector<std::string>>{{"late"}}));
}

TEST(CallbackBatchTest, ABatchBelongsToItsOwnThread) {
  Writer writer;
  bool deferred_elsewhere = true;
  {
    CallbackBatch batch;
    std::thread other([&] { deferred_elsewhere = CallbackBatch::Defer(&writer, [] {}); });
    other.join();
  }
  EXPECT_FALSE(deferred_elsewhere);
  EXPECT_TRUE(writer.writes.empty());
}

}  // namespace
}  // namespace eonce
