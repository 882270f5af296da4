// SubmitBatcher over a fake sender that holds each batch until the test answers it: a lone
// command goes at once, commands that arrive while every call is busy go together in the
// next one, each gets its own answer, a failed call fails each of its commands, and the
// queue has a limit. And SendEachAlone, the way back for a batch sent one item at a time.
#include "common/rpc/submit_batcher.h"

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/rpc/call_batcher.h"
#include "common/base/status.h"
#include "gtest/gtest.h"

namespace eonce {
namespace {

class SubmitBatcherTest : public ::testing::Test {
 protected:
  struct Sent {
    std::vector<v1::Command> commands;
    int64_t deadline_ms;
    SubmitBatcher::BatchDone done;
  };

  std::unique_ptr<SubmitBatcher> Make(int max_calls, int max_batch, size_t max_waiting = 4096,
                                      size_t max_batch_bytes = 4 << 20) {
    SubmitBatcher::Options options;
    options.max_calls = max_calls;
    options.max_batch = max_batch;
    options.max_waiting = max_waiting;
    options.max_batch_bytes = max_batch_bytes;
    return std::make_unique<SubmitBatcher>(
        options, [this](std::vector<v1::Command> commands, int64_t deadline_ms,
                        SubmitBatcher::BatchDone done) {
          sent_.push_back(Sent{std::move(commands), deadline_ms, std::move(done)});
        });
  }

  void Submit(SubmitBatcher& batcher, const std::string& id, size_t request_bytes = 0,
              int64_t deadline_ms = 0) {
    v1::Command c;
    c.set_command_id(id);
    c.set_request(std::string(request_bytes, 'r'));
    batcher.Submit(c, deadline_ms, [this, id](SubmitBatcher::Answer answer) {
      answers_.push_back(answer.ok() ? id + "=" + answer->result().response()
                                     : id + "!" + std::string(ReasonOf(answer.status())));
    });
  }

  // Answers batch `i` with each command's id as its response.
  void AnswerEach(size_t i) {
    std::vector<SubmitBatcher::Answer> each;
    for (const v1::Command& c : sent_[i].commands) {
      v1::SubmitResponse r;
      r.mutable_result()->set_response("r-" + c.command_id());
      each.push_back(r);
    }
    sent_[i].done(std::move(each));
  }

  std::vector<Sent> sent_;
  std::vector<std::string> answers_;
};

TEST_F(SubmitBatcherTest, ALoneCommandGoesAtOnceAndTheRestWaitForAFreeCall) {
  auto batcher = Make(/*max_calls=*/1, /*max_batch=*/3);
  Submit(*batcher, "a");
  ASSERT_EQ(sent_.size(), 1u) << "a command alone is never held back";
  for (const char* id : {"b", "c", "d", "e"}) Submit(*batcher, id);
  EXPECT_EQ(sent_.size(), 1u) << "the only call is busy: the others wait";
  AnswerEach(0);
  ASSERT_EQ(sent_.size(), 2u);
  ASSERT_EQ(sent_[1].commands.size(), 3u) << "the waiting commands go together, up to the limit";
  EXPECT_EQ(sent_[1].commands[0].command_id(), "b");
  EXPECT_EQ(sent_[1].commands[2].command_id(), "d");
  AnswerEach(1);
  ASSERT_EQ(sent_.size(), 3u);
  EXPECT_EQ(sent_[2].commands.size(), 1u);
  AnswerEach(2);
  EXPECT_EQ(answers_, (std::vector<std::string>{"a=r-a", "b=r-b", "c=r-c", "d=r-d", "e=r-e"}));
}

TEST_F(SubmitBatcherTest, ABatchIsDueByTheEarliestDeadlineOfItsCommands) {
  auto batcher = Make(/*max_calls=*/1, /*max_batch=*/64);
  Submit(*batcher, "a", 0, 500);
  Submit(*batcher, "b", 0, 900);
  Submit(*batcher, "c", 0, 700);
  Submit(*batcher, "d", 0, 0);
  EXPECT_EQ(sent_[0].deadline_ms, 500);
  EXPECT_TRUE(!batcher->Idle());
  AnswerEach(0);
  ASSERT_EQ(sent_.size(), 2u);
  EXPECT_EQ(sent_[1].deadline_ms, 700) << "no command may be answered after its deadline";
  AnswerEach(1);
  EXPECT_TRUE(batcher->Idle());
}

TEST_F(SubmitBatcherTest, AFailedCallFailsEachOfItsCommandsOnce) {
  auto batcher = Make(/*max_calls=*/2, /*max_batch=*/64);
  Submit(*batcher, "a");
  Submit(*batcher, "b");
  ASSERT_EQ(sent_.size(), 2u) << "two calls may be in flight";
  Submit(*batcher, "c");
  sent_[0].done(Error(absl::StatusCode::kDeadlineExceeded, "", "late"));
  ASSERT_EQ(sent_.size(), 3u);
  // A sidecar that answered fewer items than it was sent: none of them is taken as known.
  sent_[1].done(std::vector<SubmitBatcher::Answer>{});
  AnswerEach(2);
  ASSERT_EQ(answers_.size(), 3u);
  EXPECT_EQ(answers_[0], "a!");
  EXPECT_EQ(answers_[1], "b!BATCH_MISMATCH");
  EXPECT_EQ(answers_[2], "c=r-c");
}

TEST_F(SubmitBatcherTest, PastItsLimitAWaitingCommandIsRefusedAndNothingIsSent) {
  auto batcher = Make(/*max_calls=*/1, /*max_batch=*/64, /*max_waiting=*/2);
  Submit(*batcher, "a");
  Submit(*batcher, "b");
  Submit(*batcher, "c");
  Submit(*batcher, "d");
  ASSERT_EQ(answers_.size(), 1u);
  EXPECT_EQ(answers_[0], "d!OVERLOADED");
  AnswerEach(0);
  AnswerEach(1);
  EXPECT_EQ(sent_[1].commands.size(), 2u);
  EXPECT_EQ(answers_.size(), 4u);
}

TEST_F(SubmitBatcherTest, ABatchStaysUnderItsByteLimitAndAnOversizedCommandGoesAlone) {
  auto batcher = Make(/*max_calls=*/1, /*max_batch=*/64, /*max_waiting=*/64,
                      /*max_batch_bytes=*/1000);
  Submit(*batcher, "first");
  for (const char* id : {"a", "b", "c"}) Submit(*batcher, id, 400);
  Submit(*batcher, "huge", 5000);
  Submit(*batcher, "d", 400);
  AnswerEach(0);
  ASSERT_EQ(sent_.size(), 2u);
  EXPECT_EQ(sent_[1].commands.size(), 2u) << "a and b fit in 1000 bytes, c does not";
  AnswerEach(1);
  ASSERT_EQ(sent_.size(), 3u);
  EXPECT_EQ(sent_[2].commands.size(), 1u) << "c, then the huge one would pass the limit";
  AnswerEach(2);
  ASSERT_EQ(sent_.size(), 4u);
  ASSERT_EQ(sent_[3].commands.size(), 1u) << "a command past the limit goes alone";
  EXPECT_EQ(sent_[3].commands[0].command_id(), "huge");
  AnswerEach(3);
  AnswerEach(4);
  EXPECT_EQ(answers_.size(), 6u);
}

TEST(SendEachAloneTest, EachItemGoesAloneAndTheAnswersComeTogetherInOrder) {
  // The calls answer in the reverse of the order they were made.
  std::vector<std::pair<int, std::function<void(std::string)>>> calls;
  std::vector<std::vector<std::string>> delivered;
  SendEachAlone<int, std::string>(
      {1, 2, 3},
      [&](int item, std::function<void(std::string)> answered) {
        calls.emplace_back(item, std::move(answered));
      },
      [&](std::vector<std::string> answers) { delivered.push_back(std::move(answers)); });
  ASSERT_EQ(calls.size(), 3u);  // all sent at once, one call each
  for (int i = 2; i >= 0; --i) {
    EXPECT_TRUE(delivered.empty()) << "answered before its last call was";
    calls[i].second(absl::StrCat("answer ", calls[i].first));
  }
  ASSERT_EQ(delivered.size(), 1u);
  EXPECT_EQ(delivered[0], (std::vector<std::string>{"answer 1", "answer 2", "answer 3"}));

  SendEachAlone<int, std::string>(
      {}, [&](int, std::function<void(std::string)>) { ADD_FAILURE() << "no item, no call"; },
      [&](std::vector<std::string> answers) { delivered.push_back(std::move(answers)); });
  ASSERT_EQ(delivered.size(), 2u);
  EXPECT_TRUE(delivered[1].empty());
}

}  // namespace
}  // namespace eonce
