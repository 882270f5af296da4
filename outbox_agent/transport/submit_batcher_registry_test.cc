#include "outbox_agent/transport/submit_batcher_registry.h"

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace eonce {
namespace {

// A batcher whose calls are answered at once, one answer per command.
std::unique_ptr<SubmitBatcher> Answering() {
  return std::make_unique<SubmitBatcher>(
      SubmitBatcher::Options{}, [](std::vector<v1::Command> commands, int64_t,
                                   SubmitBatcher::BatchDone done) {
        std::vector<absl::StatusOr<v1::SubmitResponse>> answers(commands.size(),
                                                                 v1::SubmitResponse());
        done(std::move(answers));
      });
}

SubmitBatcherRegistry::Key KeyOf(int i) {
  return SubmitBatcherRegistry::Key{nullptr, "tenant", "actor", i};
}

TEST(SubmitBatcherRegistryTest, DropsIdleBatchersNobodyHolds) {
  SubmitBatcherRegistry registry(4);
  for (int i = 0; i < 10; ++i) registry.For(KeyOf(i), Answering);
  EXPECT_LE(registry.size(), 5u);
}

// A caller that got an empty (hence idle) batcher and has not added to it yet must find it
// alive: the clean-up another caller's new key runs never drops a held batcher.
TEST(SubmitBatcherRegistryTest, NeverDropsABatcherWhileItsHandOutIsHeld) {
  SubmitBatcherRegistry registry(4);
  std::shared_ptr<SubmitBatcher> held = registry.For(KeyOf(0), Answering);
  for (int i = 1; i < 20; ++i) registry.For(KeyOf(i), Answering);
  EXPECT_EQ(registry.For(KeyOf(0), Answering), held);
  int answered = 0;
  held->Submit(v1::Command(), 0, [&answered](absl::StatusOr<v1::SubmitResponse> answer) {
    EXPECT_TRUE(answer.ok());
    ++answered;
  });
  EXPECT_EQ(answered, 1);
}

// Two threads, each with its own stream of new keys past the limit, each adding to the
// batcher it got: every command is answered through the batcher it was handed to.
TEST(SubmitBatcherRegistryTest, TwoThreadsAddingUnderChurn) {
  SubmitBatcherRegistry registry(8);
  std::atomic<int> answered{0};
  auto run = [&registry, &answered](int offset) {
    for (int i = 0; i < 2000; ++i) {
      std::shared_ptr<SubmitBatcher> batcher = registry.For(KeyOf(offset + i % 40), Answering);
      batcher->Submit(v1::Command(), 0,
                      [&answered](absl::StatusOr<v1::SubmitResponse>) { ++answered; });
    }
  };
  std::thread a(run, 0);
  std::thread b(run, 1000);
  a.join();
  b.join();
  EXPECT_EQ(answered.load(), 4000);
}

}  // namespace
}  // namespace eonce
