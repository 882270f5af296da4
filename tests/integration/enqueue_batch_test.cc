// EnqueueBatch against a real agent over loopback: each command of a batch is taken as
// Enqueue takes it and answered on its own, a batch the agent cannot take is refused
// whole with nothing stored, and the EnqueueBatcher shares calls among concurrent
// commands (and, against an agent that holds its call, ends without waiting for it), as
// does the blocking client's Enqueue called from many threads (and, against an agent
// without EnqueueBatch, falls back to one Enqueue each). The agent sends nothing (its
// sidecar address leads nowhere), so every stored record stays as Enqueue left it.
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/base/clock.h"
#include "common/command/command.h"
#include "common/rpc/grpc_status.h"
#include "common/base/random.h"
#include "common/base/status.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"
#include "outbox_agent/doors/agent_server.h"
#include "outbox_agent/client/client.h"
#include "outbox_agent/client/enqueue_batcher.h"
#include "eonce/ledger/v1/ledger.pb.h"
#include "tests/util/temp_dir.h"

namespace eonce {
namespace {

v1::Command Open(const std::string& id, const std::string& command_id) {
  ledger::v1::OpenAccountRequest open;
  open.set_id(id);
  v1::Command c;
  c.set_command_id(command_id);
  c.set_target_method("/eonce.ledger.v1.Ledger/OpenAccount");
  c.set_request(open.SerializeAsString());
  c.mutable_entity()->set_type("account");
  c.mutable_entity()->set_id(id);
  return c;
}

class EnqueueBatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    AgentServerOptions options;
    options.data_dir = testing::FreshDir("agent");
    options.tenant = "acme";
    options.default_sidecar = "127.0.0.1:1";  // nothing is sent
    options.startup_info_wait_ms = 0;
    auto agent = AgentServer::Start(options, RealClock::Get(), RealRandom::Get());
    ASSERT_TRUE(agent.ok()) << agent.status();
    agent_ = std::move(*agent);
    stub_ = v1::Agent::NewStub(grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(agent_->port()), grpc::InsecureChannelCredentials()));
  }

  void TearDown() override {
    if (agent_ != nullptr) {
      EXPECT_TRUE(agent_->Shutdown(1000).ok());
    }
  }

  absl::StatusOr<v1::EnqueueBatchResponse> Batch(const std::vector<v1::Command>& commands) {
    grpc::ClientContext context;
    v1::EnqueueBatchRequest request;
    for (const v1::Command& c : commands) *request.add_commands() = c;
    v1::EnqueueBatchResponse response;
    grpc::Status status = stub_->EnqueueBatch(&context, request, &response);
    if (!status.ok()) return FromGrpcStatus(status, &context);
    return response;
  }

  bool Stored(const std::string& command_id) {
    auto record = agent_->store().Get(command_id);
    return record.ok() && record->has_value();
  }

  std::unique_ptr<AgentServer> agent_;
  std::unique_ptr<v1::Agent::Stub> stub_;
};

TEST_F(EnqueueBatchTest, EachCommandIsTakenAsEnqueueTakesItAndAnsweredOnItsOwn) {
  v1::Command other_payload = Open("bob", "open-bob");
  other_payload.mutable_entity()->set_id("carol");
  other_payload.set_request(Open("carol", "x").request());
  v1::Command invalid = Open("dave", "open-dave");
  invalid.clear_target_method();
  auto answered = Batch({Open("alice", "open-alice"), Open("bob", "open-bob"),
                         Open("alice", "open-alice"), other_payload, invalid});
  ASSERT_TRUE(answered.ok()) << answered.status();
  ASSERT_EQ(answered->items_size(), 5);
  // Stored, durable, and without the request bytes the caller already has.
  for (int i : {0, 1}) {
    const v1::EnqueueBatchItem& item = answered->items(i);
    ASSERT_EQ(item.code(), 0) << item.message();
    EXPECT_TRUE(item.response().created());
    EXPECT_EQ(item.response().record().state(), v1::QUEUED);
    EXPECT_TRUE(item.response().record().command().request().empty());
  }
  EXPECT_EQ(answered->items(0).response().record().command().command_id(), "open-alice");
  EXPECT_EQ(answered->items(1).response().record().command().command_id(), "open-bob");
  // The same id and payload again, in the same batch: the one record, not created twice.
  ASSERT_EQ(answered->items(2).code(), 0) << answered->items(2).message();
  EXPECT_FALSE(answered->items(2).response().created());
  EXPECT_EQ(answered->items(2).response().record().enqueue_seq(),
            answered->items(0).response().record().enqueue_seq());
  // The same id with another payload, and a command Enqueue refuses: errors of their own,
  // with their reasons, and nothing stored for them.
  absl::Status conflict = StatusFromParts(answered->items(3).code(), answered->items(3).message(),
                                          answered->items(3).error_details());
  EXPECT_EQ(conflict.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(ReasonOf(conflict), "COMMAND_ID_CONFLICT");
  EXPECT_EQ(answered->items(4).code(), static_cast<int>(absl::StatusCode::kInvalidArgument));
  EXPECT_FALSE(Stored("open-dave"));
  auto bob = agent_->store().Get("open-bob");
  ASSERT_TRUE(bob.ok() && bob->has_value());
  EXPECT_EQ((*bob)->command().request(), Open("bob", "x").request());  // the first payload
  EXPECT_EQ(agent_->store().CountsByState()[v1::QUEUED], 2);
}

TEST_F(EnqueueBatchTest, ABatchTheAgentCannotTakeIsRefusedWholeWithNothingStored) {
  auto empty = Batch({});
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
  std::vector<v1::Command> too_many;
  for (int i = 0; i <= kMaxBatchCommands; ++i) {
    too_many.push_back(Open(absl::StrCat("a", i), absl::StrCat("open-a", i)));
  }
  auto refused = Batch(too_many);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReasonOf(refused.status()), "BATCH_TOO_LARGE");
  for (const v1::Command& c : too_many) EXPECT_FALSE(Stored(c.command_id())) << c.command_id();
  // One fewer is taken.
  too_many.pop_back();
  auto taken = Batch(too_many);
  ASSERT_TRUE(taken.ok()) << taken.status();
  for (const v1::Command& c : too_many) EXPECT_TRUE(Stored(c.command_id())) << c.command_id();
}

TEST_F(EnqueueBatchTest, TheBatcherSharesCallsAmongConcurrentCommands) {
  constexpr int kCommands = 300;
  EnqueueBatcher::Options options = EnqueueBatcher::DefaultOptions();
  options.max_calls = 1;
  std::atomic<int> created{0}, answered{0};
  absl::Notification all_answered;
  uint64_t calls = 0;
  {
    EnqueueBatcher batcher(options, *stub_, RealClock::Get());
    for (int i = 0; i < kCommands; ++i) {
      batcher.Enqueue(Open(absl::StrCat("p", i), absl::StrCat("open-p", i)),
                      RealClock::Get().NowMs() + 30'000,
                      [&](EnqueueBatcher::Answer answer) {
                        if (answer.ok() && answer->created()) created.fetch_add(1);
                        if (answered.fetch_add(1) + 1 == kCommands) all_answered.Notify();
                      });
    }
    ASSERT_TRUE(all_answered.WaitForNotificationWithTimeout(absl::Seconds(60)));
    calls = batcher.calls_started();
  }
  EXPECT_EQ(created.load(), kCommands);
  for (int i = 0; i < kCommands; ++i) EXPECT_TRUE(Stored(absl::StrCat("open-p", i)));
  // One call at a time: the first command goes alone, the others wait and share calls of
  // up to 64.
  EXPECT_LT(calls, static_cast<uint64_t>(kCommands / 10));
  EXPECT_GE(calls, static_cast<uint64_t>(kCommands / kMaxBatchCommands));
}

// The blocking client's Enqueue, called from many threads at once, shares EnqueueBatch
// calls: every command is stored and answered to its own caller, in fewer calls than
// commands.
TEST_F(EnqueueBatchTest, ConcurrentClientEnqueuesShareCalls) {
  constexpr int kThreads = 32;
  constexpr int kEach = 10;
  auto client = AgentClient::Connect("127.0.0.1:" + std::to_string(agent_->port()));
  std::atomic<int> mismatched{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        const std::string id = absl::StrCat("t", t, "-", i);
        auto stored = client->Enqueue(Open(id, absl::StrCat("open-", id)));
        if (!stored.ok() || stored->record().command().command_id() != "open-" + id ||
            !stored->created()) {
          mismatched.fetch_add(1);
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(mismatched.load(), 0);
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kEach; ++i) EXPECT_TRUE(Stored(absl::StrCat("open-t", t, "-", i)));
  }
  // At most max_calls (4) calls in flight for 32 waiting threads: the others' commands
  // wait and go together.
  const uint64_t calls = client->shared_calls_started();
  EXPECT_GT(calls, 0u);
  EXPECT_LT(calls, static_cast<uint64_t>(kThreads * kEach * 3 / 4)) << calls << " calls";
}

// A stand-in agent on a loopback port of its own (`*port`).
std::unique_ptr<grpc::Server> ServeOnLoopback(grpc::Service* agent, int* port) {
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), port);
  builder.RegisterService(agent);
  return builder.BuildAndStart();
}

// An agent from before EnqueueBatch: it serves Enqueue and answers EnqueueBatch
// UNIMPLEMENTED, as gRPC does for a method a server does not know.
class OlderAgent : public v1::Agent::CallbackService {
 public:
  grpc::ServerUnaryReactor* Enqueue(grpc::CallbackServerContext* context,
                                    const v1::EnqueueRequest* request,
                                    v1::EnqueueResponse* response) override {
    enqueues_.fetch_add(1);
    *response->mutable_record()->mutable_command() = request->command();
    response->set_created(true);
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
  grpc::ServerUnaryReactor* EnqueueBatch(grpc::CallbackServerContext* context,
                                         const v1::EnqueueBatchRequest* /*request*/,
                                         v1::EnqueueBatchResponse* /*response*/) override {
    batches_.fetch_add(1);
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status(grpc::StatusCode::UNIMPLEMENTED, ""));
    return reactor;
  }
  std::atomic<int> enqueues_{0};
  std::atomic<int> batches_{0};
};

// The client asks an older agent for EnqueueBatch once, then sends each command, from
// Enqueue and EnqueueMany alike, as an Enqueue of its own.
TEST(AgentClientTest, AnAgentWithoutEnqueueBatchGetsOneEnqueueEach) {
  OlderAgent older;
  int port = 0;
  std::unique_ptr<grpc::Server> server = ServeOnLoopback(&older, &port);
  ASSERT_NE(server, nullptr);
  auto client = AgentClient::Connect(absl::StrCat("127.0.0.1:", port));
  for (int i = 0; i < 3; ++i) {
    auto stored = client->Enqueue(Open(absl::StrCat("o", i), ""));
    ASSERT_TRUE(stored.ok()) << stored.status();
    EXPECT_EQ(stored->record().command().entity().id(), absl::StrCat("o", i));
    EXPECT_FALSE(stored->record().command().command_id().empty());
  }
  std::vector<v1::Command> many;
  for (int i = 0; i < 5; ++i) many.push_back(Open(absl::StrCat("m", i), ""));
  EnqueueAnswers answers = client->EnqueueMany(many);
  ASSERT_EQ(answers.size(), 5u);
  for (const auto& answer : answers) EXPECT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(older.batches_.load(), 1);
  EXPECT_EQ(older.enqueues_.load(), 8);
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
}

// An agent that takes EnqueueBatch calls and never answers them, until they are
// cancelled.
class HoldingAgent : public v1::Agent::CallbackService {
 public:
  grpc::ServerUnaryReactor* EnqueueBatch(grpc::CallbackServerContext* /*context*/,
                                         const v1::EnqueueBatchRequest* /*request*/,
                                         v1::EnqueueBatchResponse* /*response*/) override {
    class Held : public grpc::ServerUnaryReactor {
     public:
      void OnCancel() override { Finish(grpc::Status::CANCELLED); }
      void OnDone() override { delete this; }
    };
    if (received_.fetch_add(1) == 0) first_.Notify();
    return new Held;
  }
  absl::Notification first_;
  std::atomic<int> received_{0};
};

// The batcher's end does not wait for an agent that holds its call: it cancels the call,
// answers the command, and returns once the call's state is gone.
TEST(EnqueueBatcherTest, ItsEndCancelsACallTheAgentHolds) {
  HoldingAgent holding;
  int port = 0;
  std::unique_ptr<grpc::Server> server = ServeOnLoopback(&holding, &port);
  ASSERT_NE(server, nullptr);
  auto stub = v1::Agent::NewStub(grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                                                     grpc::InsecureChannelCredentials()));
  auto batcher = std::make_unique<EnqueueBatcher>(EnqueueBatcher::DefaultOptions(), *stub,
                                                  RealClock::Get());
  absl::Notification answered;
  absl::Status answer;
  v1::Command c;
  c.set_command_id("held");
  batcher->Enqueue(c, /*deadline_ms=*/0, [&](EnqueueBatcher::Answer a) {
    answer = a.status();
    answered.Notify();
  });
  ASSERT_TRUE(holding.first_.WaitForNotificationWithTimeout(absl::Seconds(10)));
  absl::Notification ended;
  std::thread end([&] {
    batcher.reset();
    ended.Notify();
  });
  const bool in_time = ended.WaitForNotificationWithTimeout(absl::Seconds(10));
  // Cancels the held call, should the end still wait for it.
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  end.join();
  EXPECT_TRUE(in_time) << "the batcher's end waited for a call the agent held";
  ASSERT_TRUE(answered.HasBeenNotified());
  EXPECT_EQ(answer.code(), absl::StatusCode::kCancelled) << answer;
}

}  // namespace
}  // namespace eonce
