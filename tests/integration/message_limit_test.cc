// The real sidecar at its binary's message limit (its largest request plus 1 MiB), in front
// of a business whose answers are 600 KiB each: one answer fits a message, a batch of
// them does not. The sidecar refuses such a batch's answer as MESSAGE_TOO_LARGE (instead
// of letting gRPC drop it), after taking each command once; the agent's client then sends
// each command alone and hears its own answer, replayed from its record; the business
// sees each command once.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/base/clock.h"
#include "common/rpc/grpc_status.h"
#include "common/base/status.h"
#include "dedupe_sidecar/upstream/fake_upstream.h"
#include "dedupe_sidecar/doors/sidecar_service.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "outbox_agent/transport/grpc_sidecar_client.h"
#include "tests/integration/ledger_calls.h"
#include "tests/util/temp_dir.h"

namespace eonce {
namespace {

constexpr size_t kAnswerBytes = 600 << 10;

class MessageLimitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    business_.set_next_reply(FakeUpstream::Ok(std::string(kAnswerBytes, 'a')));
    SidecarServerOptions options;
    options.data_dir = testing::FreshDir("sidecar");
    options.upstream = &business_;
    options.max_message_bytes =
        static_cast<int>(options.deduper.limits.max_request_bytes) + (1 << 20);
    auto sidecar = SidecarServer::Start(options, RealClock::Get());
    ASSERT_TRUE(sidecar.ok()) << sidecar.status();
    sidecar_ = std::move(*sidecar);
    address_ = absl::StrCat("127.0.0.1:", sidecar_->port());
    stub_ = v1::Sidecar::NewStub(
        grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
  }

  FakeUpstream business_;
  std::unique_ptr<SidecarServer> sidecar_;
  std::string address_;
  std::unique_ptr<v1::Sidecar::Stub> stub_;
};

TEST_F(MessageLimitTest, ABatchWhoseAnswerIsPastTheLimitIsRefusedAfterEachCommandWasTaken) {
  std::vector<v1::Command> commands;
  for (int i = 0; i < 4; ++i) {
    commands.push_back(testing::OpenAccountCommand(absl::StrCat("b", i), 1));
  }
  auto batch = testing::SubmitBatchTo(*stub_, commands);
  ASSERT_FALSE(batch.ok());
  EXPECT_EQ(batch.status().code(), absl::StatusCode::kResourceExhausted) << batch.status();
  EXPECT_EQ(ReasonOf(batch.status()), "MESSAGE_TOO_LARGE") << batch.status();
  EXPECT_TRUE(PastMessageLimit(batch.status()));
  EXPECT_EQ(business_.forwards(), commands.size());
  // Each alone: its answer, from its record, with nothing forwarded again.
  for (const v1::Command& c : commands) {
    auto one = testing::SubmitTo(*stub_, c);
    ASSERT_TRUE(one.ok()) << one.status();
    EXPECT_EQ(one->disposition(), v1::REPLAYED) << c.command_id();
    EXPECT_EQ(one->result().response().size(), kAnswerBytes);
  }
  EXPECT_EQ(business_.forwards(), commands.size());
}

TEST_F(MessageLimitTest, TheAgentsClientHearsEachAnswerOfABatchPastTheLimit) {
  constexpr int kCommands = 12;
  // The first two calls are held at the business, so that the commands sent meanwhile
  // queue behind them and go together when they are answered.
  business_.set_hold(true);
  absl::Mutex mu;
  std::map<std::string, std::string> answers;
  absl::Notification all;
  {
    auto client = GrpcSidecarClient::Create("", address_, TlsFiles(), RealClock::Get());
    ASSERT_TRUE(client.ok()) << client.status();
    Session session{"acme", "agent", 1};
    for (int i = 0; i < kCommands; ++i) {
      v1::Command c = testing::OpenAccountCommand(absl::StrCat("c", i), 1);
      (*client)->Submit(c, session, RealClock::Get().NowMs() + 10'000,
                        [&, id = c.command_id()](absl::StatusOr<v1::SubmitResponse> r) {
                          absl::MutexLock lock(&mu);
                          answers[id] = !r.ok() ? r.status().ToString()
                                        : r->result().response().size() == kAnswerBytes
                                            ? "answer"
                                            : "a short answer";
                          if (answers.size() == kCommands) all.Notify();
                        });
    }
    ASSERT_EQ(business_.WaitUntilHeld(2, absl::Seconds(10)), 2u);
    business_.set_hold(false);
    business_.Release(FakeUpstream::Ok(std::string(kAnswerBytes, 'a')));
    business_.Release(FakeUpstream::Ok(std::string(kAnswerBytes, 'a')));
    ASSERT_TRUE(all.WaitForNotificationWithTimeout(absl::Seconds(30)));
  }
  for (int i = 0; i < kCommands; ++i) {
    const std::string id = absl::StrCat("open-c", i);
    EXPECT_EQ(answers[id], "answer") << id;
  }
  EXPECT_EQ(business_.forwards(), static_cast<size_t>(kCommands)) << "a command ran twice";
}

}  // namespace
}  // namespace eonce
