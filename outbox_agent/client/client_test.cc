// The client library's promise on the producer -> agent hop: one intent is one command,
// even when answers are lost. The retry loop alone (scripted attempts, a manual clock),
// then the real agent behind a proxy that loses its answers.
#include "outbox_agent/client/client.h"

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "common/base/clock.h"
#include "common/base/random.h"
#include "common/base/status.h"
#include "gtest/gtest.h"
#include "outbox_agent/doors/agent_server.h"
#include "tests/util/fault_proxy.h"
#include "tests/util/temp_dir.h"

namespace eonce {
namespace {

v1::Command Intent(int n) {
  v1::Command c;
  c.set_target_method("/eonce.ledger.v1.Ledger/OpenAccount");
  c.set_request(absl::StrCat("open ", n));
  c.mutable_entity()->set_type("account");
  c.mutable_entity()->set_id(absl::StrCat("a", n));
  return c;
}

TEST(EnqueueWithRetriesTest, LostAnswersAreRetriedWithTheIdCreatedBeforeTheFirstAttempt) {
  ManualClock clock;
  SeededRandom random(7);
  std::vector<std::string> ids;
  std::vector<absl::Status> script = {absl::UnavailableError("reset"),
                                      absl::DeadlineExceededError("late")};
  int64_t started = clock.NowMs();
  auto answer = EnqueueWithRetries(Intent(1), EnqueueOptions(), random, clock,
                                   [&](const v1::Command& c) -> absl::StatusOr<v1::EnqueueResponse> {
                                     ids.push_back(c.command_id());
                                     if (ids.size() <= script.size()) return script[ids.size() - 1];
                                     v1::EnqueueResponse r;
                                     *r.mutable_record()->mutable_command() = c;
                                     return r;
                                   });
  ASSERT_TRUE(answer.ok()) << answer.status();
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(ids[0].size(), 32u);
  EXPECT_EQ(ids[1], ids[0]);
  EXPECT_EQ(ids[2], ids[0]);
  EXPECT_EQ(answer->record().command().command_id(), ids[0]);
  // Two waits, each within the backoff's bound.
  EXPECT_LE(clock.NowMs() - started, 2 * EnqueueOptions().max_backoff_ms);
}

TEST(EnqueueWithRetriesTest, GivenIdsAreKeptOtherErrorsAreFinalAndAttemptsAreBounded) {
  ManualClock clock;
  SeededRandom random(7);
  v1::Command given = Intent(2);
  given.set_command_id("mine");
  int calls = 0;
  auto refused = EnqueueWithRetries(given, EnqueueOptions(), random, clock,
                                    [&](const v1::Command& c) -> absl::StatusOr<v1::EnqueueResponse> {
                                      ++calls;
                                      EXPECT_EQ(c.command_id(), "mine");
                                      return absl::InvalidArgumentError("entity.type");
                                    });
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(calls, 1);

  EnqueueOptions options;
  options.max_attempts = 4;
  calls = 0;
  auto gone = EnqueueWithRetries(Intent(3), options, random, clock,
                                 [&](const v1::Command&) -> absl::StatusOr<v1::EnqueueResponse> {
                                   ++calls;
                                   return absl::UnavailableError("connection refused");
                                 });
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(calls, 4);
}

// Answers by command id for the scripted batch attempts below.
v1::EnqueueResponse Stored(const v1::Command& c) {
  v1::EnqueueResponse r;
  *r.mutable_record()->mutable_command() = c;
  r.set_created(true);
  return r;
}

TEST(EnqueueManyWithRetriesTest, OnlyTheCommandsWhoseAnswersWereLostGoAgainWithTheirIds) {
  ManualClock clock;
  SeededRandom random(7);
  std::vector<v1::Command> intents;
  for (int n = 0; n < 70; ++n) intents.push_back(Intent(n));
  intents[3].set_command_id("given");
  std::vector<std::vector<std::string>> calls;  // the ids of each call, in order
  auto answers = EnqueueManyWithRetries(
      intents, EnqueueOptions(), size_t{1} << 20, random, clock,
      [&](const std::vector<v1::Command>& batch) -> absl::StatusOr<EnqueueAnswers> {
        std::vector<std::string> ids;
        for (const v1::Command& c : batch) ids.push_back(c.command_id());
        calls.push_back(ids);
        if (calls.size() == 1) return absl::UnavailableError("reset");  // the first 64
        EnqueueAnswers out;
        for (size_t k = 0; k < batch.size(); ++k) {
          if (calls.size() == 2 && k == 1) {
            out.push_back(absl::DeadlineExceededError("late"));
          } else if (calls.size() == 2 && k == 2) {
            out.push_back(absl::InvalidArgumentError("entity.type"));
          } else {
            out.push_back(Stored(batch[k]));
          }
        }
        return out;
      });
  ASSERT_EQ(answers.size(), intents.size());
  // 64 and 6 at first; then the 64 of the failed call and the one late answer.
  ASSERT_EQ(calls.size(), 4u);
  EXPECT_EQ(calls[0].size(), 64u);
  EXPECT_EQ(calls[1].size(), 6u);
  EXPECT_EQ(calls[2].size(), 64u);
  EXPECT_EQ(calls[3].size(), 1u);
  EXPECT_EQ(calls[2], calls[0]);  // the same ids again
  EXPECT_EQ(calls[3][0], calls[1][1]);
  EXPECT_EQ(calls[0][3], "given");
  EXPECT_EQ(calls[0][0].size(), 32u);
  // Each answer in its command's place; the refused one is final and was not sent again.
  for (size_t i = 0; i < answers.size(); ++i) {
    if (i == 66) {
      EXPECT_EQ(answers[i].status().code(), absl::StatusCode::kInvalidArgument);
      continue;
    }
    ASSERT_TRUE(answers[i].ok()) << i << ": " << answers[i].status();
    EXPECT_EQ(answers[i]->record().command().request(), intents[i].request());
  }
}

TEST(EnqueueManyWithRetriesTest, BatchesStayWithinTheirBytesAndAttemptsAreBounded) {
  ManualClock clock;
  SeededRandom random(7);
  std::vector<v1::Command> intents;
  for (int n = 0; n < 5; ++n) {
    intents.push_back(Intent(n));
    intents.back().set_request(std::string(600, 'x'));
  }
  EnqueueOptions options;
  options.max_attempts = 3;
  std::vector<size_t> sizes;
  auto answers = EnqueueManyWithRetries(
      intents, options, 1'000, random, clock,
      [&](const std::vector<v1::Command>& batch) -> absl::StatusOr<EnqueueAnswers> {
        sizes.push_back(batch.size());
        return absl::UnavailableError("connection refused");
      });
  // One command of 600 bytes and more per batch of 1,000, five batches an attempt.
  EXPECT_EQ(sizes, std::vector<size_t>(15, 1));
  for (const auto& answer : answers) {
    EXPECT_EQ(answer.status().code(), absl::StatusCode::kUnavailable);
  }
}

class LostAnswersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    AgentServerOptions options;
    options.data_dir = testing::FreshDir("agent");
    options.tenant = "acme";
    options.default_sidecar = "127.0.0.1:1";  // nothing is sent: records stay as stored
    options.startup_info_wait_ms = 0;
    auto agent = AgentServer::Start(options, RealClock::Get(), RealRandom::Get());
    ASSERT_TRUE(agent.ok()) << agent.status();
    agent_ = std::move(*agent);
    std::string direct = "127.0.0.1:" + std::to_string(agent_->port());
    auto proxy = testing::FaultProxy::Start(direct, 11);
    ASSERT_TRUE(proxy.ok()) << proxy.status();
    proxy_ = std::move(*proxy);
    direct_ = AgentClient::Connect(direct);
  }

  // Enough quick attempts to outlast a proxy that loses half the answers.
  static EnqueueOptions Patient() {
    EnqueueOptions options;
    options.max_attempts = 30;
    options.base_backoff_ms = 1;
    options.max_backoff_ms = 20;
    return options;
  }

  int64_t Stored() {
    grpc::ClientContext context;
    v1::StatsResponse stats;
    EXPECT_TRUE(direct_->stub().Stats(&context, v1::StatsRequest(), &stats).ok());
    int64_t total = 0;
    for (const auto& c : stats.counts()) total += c.count();
    return total;
  }

  std::unique_ptr<AgentServer> agent_;
  std::unique_ptr<testing::FaultProxy> proxy_;
  std::unique_ptr<AgentClient> direct_;
};

// Half of the agent's answers are lost after it stored the command. Producers that give
// no id still end with one record per intent; a producer whose id is created late (by the
// agent, at each attempt) stores some intents twice, which the same count catches.
TEST_F(LostAnswersTest, OneIntentIsOneRecordWhenAnswersAreLost) {
  constexpr int kIntents = 30;
  proxy_->SetLoseResponseRatio(0.5);
  auto client = AgentClient::Connect(proxy_->address());
  const EnqueueOptions options = Patient();
  for (int n = 0; n < kIntents; ++n) {
    auto stored = client->Enqueue(Intent(n), options);
    ASSERT_TRUE(stored.ok()) << stored.status();
  }
  EXPECT_GT(proxy_->responses_lost(), 0);
  EXPECT_EQ(Stored(), kIntents);

  // The negative control: the same retries, with the id left to the agent.
  int64_t lost_before = proxy_->responses_lost();
  for (int n = kIntents; n < 2 * kIntents; ++n) {
    absl::StatusOr<v1::EnqueueResponse> stored = absl::UnavailableError("not tried");
    for (int attempt = 0; attempt < 30 && !stored.ok(); ++attempt) {
      stored = client->EnqueueOnce(Intent(n), 2'000);
    }
    ASSERT_TRUE(stored.ok()) << stored.status();
  }
  ASSERT_GT(proxy_->responses_lost(), lost_before);
  EXPECT_GT(Stored(), 2 * kIntents) << "late ids must turn a lost answer into a second record";
}

// The same promise for producers calling Enqueue from many threads at once, whose commands
// share EnqueueBatch calls: a shared call whose answer is lost goes again with its ids.
TEST_F(LostAnswersTest, OneIntentIsOneRecordWhenSharedAnswersAreLost) {
  constexpr int kThreads = 8;
  constexpr int kEach = 10;
  // A lost answer resets the proxy's connection, and every call on it fails: a third of
  // them, and more attempts, so that no command runs out of them.
  proxy_->SetLoseResponseRatio(0.3);
  auto client = AgentClient::Connect(proxy_->address());
  EnqueueOptions options = Patient();
  options.max_attempts = 100;
  options.timeout_ms = 2'000;
  absl::Mutex mu;
  std::vector<std::string> wrong;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        const int n = t * kEach + i;
        auto stored = client->Enqueue(Intent(n), options);
        if (!stored.ok() ||
            stored->record().command().entity().id() != absl::StrCat("a", n)) {
          absl::MutexLock lock(&mu);
          wrong.push_back(absl::StrCat(n, ": ", stored.status().ToString()));
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_TRUE(wrong.empty()) << absl::StrJoin(wrong, "; ");
  EXPECT_GT(proxy_->responses_lost(), 0);
  EXPECT_EQ(Stored(), kThreads * kEach);
}

// The same promise for many commands in EnqueueBatch calls: each batch whose answer is
// lost goes again with the same ids, and every intent is one record.
TEST_F(LostAnswersTest, OneIntentIsOneRecordWhenBatchAnswersAreLost) {
  constexpr int kIntents = 150;  // three batches
  proxy_->SetLoseResponseRatio(0.5);
  auto client = AgentClient::Connect(proxy_->address());
  EnqueueOptions options = Patient();
  options.timeout_ms = 2'000;
  std::vector<v1::Command> intents;
  for (int n = 0; n < kIntents; ++n) intents.push_back(Intent(n));
  EnqueueAnswers answers = client->EnqueueMany(intents, options);
  ASSERT_EQ(answers.size(), static_cast<size_t>(kIntents));
  for (int n = 0; n < kIntents; ++n) {
    ASSERT_TRUE(answers[n].ok()) << n << ": " << answers[n].status();
    EXPECT_EQ(answers[n]->record().command().entity().id(), absl::StrCat("a", n));
  }
  EXPECT_GT(proxy_->responses_lost(), 0);
  EXPECT_EQ(Stored(), kIntents);
}

}  // namespace
}  // namespace eonce
