// GrpcSidecarClient's batching, against a stand-in Sidecar served over real loopback gRPC:
// concurrent Submits share SubmitBatch calls and each gets its own answer; a sidecar
// without SubmitBatch (one from before it) gets one Submit per command, the refused
// batch's commands included, and never a command twice; a batch past the sidecar's
// message limit, either way, goes again one Submit per command.
#include "outbox_agent/transport/grpc_sidecar_client.h"

#include <atomic>
#include <ostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/base/clock.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"
#include "tests/util/held_open.h"

namespace eonce {
namespace {

// Answers each command APPLIED with its command id as the response, followed by
// `answer_pad` bytes. With `batches`, it serves SubmitBatch too, and holds each batch call
// it gets until `release` is notified, so that the commands sent meanwhile queue behind
// the calls in flight. It holds each Reconcile call at `reconciles_`.
class StandIn : public v1::Sidecar::CallbackService {
 public:
  explicit StandIn(bool batches, size_t answer_pad = 0)
      : batches_(batches), answer_pad_(answer_pad) {}

  grpc::ServerUnaryReactor* Submit(grpc::CallbackServerContext* context,
                                   const v1::SubmitRequest* request,
                                   v1::SubmitResponse* response) override {
    Count(request->command().command_id(), /*batch_size=*/0);
    *response = Applied(request->command(), answer_pad_);
    auto* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  grpc::ServerUnaryReactor* SubmitBatch(grpc::CallbackServerContext* context,
                                        const v1::SubmitBatchRequest* request,
                                        v1::SubmitBatchResponse* response) override {
    auto* reactor = context->DefaultReactor();
    if (!batches_) {
      reactor->Finish(grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "no SubmitBatch here"));
      return reactor;
    }
    release_.WaitForNotification();
    {
      absl::MutexLock lock(&mu_);
      batch_calls_++;
    }
    for (const v1::Command& c : request->commands()) {
      Count(c.command_id(), request->commands_size());
      *response->add_items()->mutable_response() = Applied(c, answer_pad_);
    }
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  grpc::ServerUnaryReactor* Reconcile(grpc::CallbackServerContext* context,
                                      const v1::ReconcileRequest* /*request*/,
                                      v1::ReconcileResponse* response) override {
    reconciles_.Hold();
    response->set_state(v1::RECORD_NOT_SEEN);
    auto* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  static v1::SubmitResponse Applied(const v1::Command& c, size_t pad) {
    v1::SubmitResponse r;
    r.set_disposition(v1::APPLIED);
    r.mutable_result()->set_response(c.command_id() + std::string(pad, '.'));
    return r;
  }

  void Count(const std::string& id, int batch_size) {
    absl::MutexLock lock(&mu_);
    seen_[id]++;
    if (batch_size > 0) largest_batch_ = std::max(largest_batch_, batch_size);
    else singles_++;
  }

  absl::Notification release_;
  absl::Mutex mu_;
  std::map<std::string, int> seen_;
  int largest_batch_ = 0;
  int singles_ = 0;
  int batch_calls_ = 0;
  testing::AnswerGate reconciles_;

 private:
  const bool batches_;
  const size_t answer_pad_;
};

class GrpcSidecarClientTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    stand_in_ = std::make_unique<StandIn>(GetParam());
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(stand_in_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    auto client = GrpcSidecarClient::Create("", absl::StrCat("127.0.0.1:", port), TlsFiles(),
                                            RealClock::Get());
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(*client);
  }

  void TearDown() override {
    client_.reset();
    server_->Shutdown();
  }

  // Outlive the client, whose destruction waits until every answer's callback returned.
  absl::Mutex mu;
  std::map<std::string, std::string> answers;
  absl::Notification all;
  std::unique_ptr<StandIn> stand_in_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<GrpcSidecarClient> client_;
};

TEST_P(GrpcSidecarClientTest, EachCommandIsAnsweredOnceWithItsOwnAnswer) {
  constexpr int kCommands = 40;
  Session session{"acme", "", 1};
  for (int i = 0; i < kCommands; ++i) {
    v1::Command c;
    c.set_command_id(absl::StrCat("c", i));
    c.set_target_method("/eonce.ledger.v1.Ledger/Transfer");
    client_->Submit(c, session, RealClock::Get().NowMs() + 10'000,
                    [&, id = c.command_id()](absl::StatusOr<v1::SubmitResponse> r) {
                      absl::MutexLock lock(&mu);
                      answers[id] = r.ok() ? r->result().response() : r.status().ToString();
                      if (answers.size() == kCommands) all.Notify();
                    });
  }
  stand_in_->release_.Notify();
  ASSERT_TRUE(all.WaitForNotificationWithTimeout(absl::Seconds(10)));
  for (int i = 0; i < kCommands; ++i) {
    const std::string id = absl::StrCat("c", i);
    EXPECT_EQ(answers[id], id);
  }
  absl::MutexLock lock(&stand_in_->mu_);
  for (int i = 0; i < kCommands; ++i) {
    EXPECT_EQ(stand_in_->seen_[absl::StrCat("c", i)], 1) << "c" << i << " sent other than once";
  }
  if (GetParam()) {
    EXPECT_GT(stand_in_->largest_batch_, 1) << "commands sent while calls were busy share one";
    EXPECT_EQ(stand_in_->singles_, 0);
  } else {
    EXPECT_EQ(stand_in_->singles_, kCommands) << "without SubmitBatch, one Submit each";
  }
}

// Submits handed over together (the replayer's round) leave together: one SubmitBatch
// with all of them, not a first call of one (or two) while the rest wait behind it.
TEST_P(GrpcSidecarClientTest, SubmitsHandedOverTogetherShareOneCall) {
  constexpr int kCommands = 10;
  Session session{"acme", "", 1};
  std::vector<v1::Command> commands(kCommands);
  std::vector<SidecarClient::SubmitCall> calls;
  for (int i = 0; i < kCommands; ++i) {
    commands[i].set_command_id(absl::StrCat("c", i));
    commands[i].set_target_method("/eonce.ledger.v1.Ledger/Transfer");
    calls.push_back(SidecarClient::SubmitCall{
        &commands[i], RealClock::Get().NowMs() + 10'000,
        [&, id = commands[i].command_id()](absl::StatusOr<v1::SubmitResponse> r) {
          absl::MutexLock lock(&mu);
          answers[id] = r.ok() ? r->result().response() : r.status().ToString();
          if (answers.size() == kCommands) all.Notify();
        }});
  }
  stand_in_->release_.Notify();
  client_->SubmitMany(session, std::move(calls));
  ASSERT_TRUE(all.WaitForNotificationWithTimeout(absl::Seconds(10)));
  for (int i = 0; i < kCommands; ++i) {
    const std::string id = absl::StrCat("c", i);
    EXPECT_EQ(answers[id], id);
  }
  absl::MutexLock lock(&stand_in_->mu_);
  for (int i = 0; i < kCommands; ++i) EXPECT_EQ(stand_in_->seen_[absl::StrCat("c", i)], 1);
  if (GetParam()) {
    EXPECT_EQ(stand_in_->batch_calls_, 1);
    EXPECT_EQ(stand_in_->largest_batch_, kCommands);
    EXPECT_EQ(stand_in_->singles_, 0);
  } else {
    EXPECT_EQ(stand_in_->singles_, kCommands) << "without SubmitBatch, one Submit each";
  }
}

INSTANTIATE_TEST_SUITE_P(SidecarKinds, GrpcSidecarClientTest, ::testing::Values(true, false),
                         [](const auto& info) {
                           return info.param ? "WithSubmitBatch" : "FromBeforeSubmitBatch";
                         });

// A sidecar whose message limit a batch exceeds, in either direction, while each command
// and each answer alone fits: every command still gets its own answer, at its first try,
// each batch's commands then going one call each (the sidecar answers a retry from its
// record, so a command that a batch whose answer was too large had run is not run again).
struct Oversize {
  const char* name;
  size_t request_pad;  // bytes each command's request carries
  size_t answer_pad;   // bytes each answer carries beyond the command id
};

void PrintTo(const Oversize& oversize, std::ostream* os) { *os << oversize.name; }

class OversizeTest : public ::testing::TestWithParam<Oversize> {};

TEST_P(OversizeTest, ABatchPastTheSidecarsMessageLimitGoesOneCommandAtATime) {
  constexpr int kCommands = 12;
  constexpr int kLimit = 700 << 10;  // two commands or two answers are past it, one is not
  StandIn stand_in(/*batches=*/true, GetParam().answer_pad);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.SetMaxReceiveMessageSize(kLimit);
  builder.SetMaxSendMessageSize(kLimit);
  builder.RegisterService(&stand_in);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  absl::Mutex mu;
  std::map<std::string, std::string> answers;
  absl::Notification all;
  {
    auto client = GrpcSidecarClient::Create("", absl::StrCat("127.0.0.1:", port), TlsFiles(),
                                            RealClock::Get());
    ASSERT_TRUE(client.ok()) << client.status();
    Session session{"acme", "", 1};
    for (int i = 0; i < kCommands; ++i) {
      v1::Command c;
      c.set_command_id(absl::StrCat("c", i));
      c.set_target_method("/eonce.ledger.v1.Ledger/Transfer");
      c.set_request(std::string(GetParam().request_pad, 'r'));
      (*client)->Submit(c, session, RealClock::Get().NowMs() + 10'000,
                        [&, id = c.command_id()](absl::StatusOr<v1::SubmitResponse> r) {
                          absl::MutexLock lock(&mu);
                          answers[id] = r.ok() ? r->result().response().substr(0, id.size())
                                               : r.status().ToString();
                          if (answers.size() == kCommands) all.Notify();
                        });
    }
    stand_in.release_.Notify();
    ASSERT_TRUE(all.WaitForNotificationWithTimeout(absl::Seconds(20)));
  }
  server->Shutdown();
  for (int i = 0; i < kCommands; ++i) {
    const std::string id = absl::StrCat("c", i);
    EXPECT_EQ(answers[id], id) << "answered with a failure at its first try";
  }
  absl::MutexLock lock(&stand_in.mu_);
  EXPECT_EQ(stand_in.seen_.size(), static_cast<size_t>(kCommands));
  EXPECT_GT(stand_in.singles_, 0) << "a batch past the limit goes one Submit per command";
}

INSTANTIATE_TEST_SUITE_P(
    Directions, OversizeTest,
    ::testing::Values(Oversize{"Requests", 400 << 10, 0}, Oversize{"Answers", 0, 400 << 10}),
    [](const auto& info) { return std::string(info.param.name); });

// gRPC destroys a call's callback closure on its own callback thread after the callback
// returned, and with it the call's state, whose ClientContext owns a reference to the
// channel. The client's end must wait for that: were the closure the channel's last owner,
// gRPC would end its process-wide callback queue from that very thread, which then polls
// the freed queue (the process aborts). Here the user's callback object holds its closure
// open on gRPC's thread: the client's end does not return until it is let go. The stand-in
// answers only once the call's start has returned, so that the closure is the last owner.
TEST(TeardownTest, TheClientsEndWaitsForEachCallsStateToGo) {
  StandIn stand_in(/*batches=*/false);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&stand_in);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  // Before the server ends, should the test stop early: it waits for every call it holds.
  absl::Cleanup let_go = [&stand_in] { stand_in.reconciles_.LetAllGo(); };
  auto client = GrpcSidecarClient::Create("", absl::StrCat("127.0.0.1:", port), TlsFiles(),
                                          RealClock::Get());
  ASSERT_TRUE(client.ok()) << client.status();
  v1::Command c;
  c.set_command_id("c");
  c.set_target_method("/eonce.ledger.v1.Ledger/Transfer");
  testing::ClosureHold hold;
  ASSERT_TRUE(hold.Take([&](std::shared_ptr<testing::HeldOpen> held,
                            std::function<void()> answered) {
    (*client)->Reconcile(c, Session{"acme", "", 1}, RealClock::Get().NowMs() + 10'000,
                         [held, answered](absl::StatusOr<v1::ReconcileResponse>) {
                           answered();
                         });
  }, [&] { stand_in.reconciles_.Answer(); })) << "no closure was held on gRPC's thread";
  EXPECT_FALSE(hold.EndedWhileHeld([&] { client->reset(); }))
      << "the client ended while a call's state, which owns its channel, was still alive";
  server->Shutdown();
}

}  // namespace
}  // namespace eonce

namespace eonce {
namespace {

// A sharded sidecar's Sidecar service as far as the map goes: it answers GetInfo and the
// slot map it is set to.
class MapStandIn : public v1::Sidecar::CallbackService {
 public:
  grpc::ServerUnaryReactor* GetInfo(grpc::CallbackServerContext* context,
                                    const v1::GetInfoRequest*,
                                    v1::GetInfoResponse* response) override {
    response->set_retention_ms(60'000);
    auto* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
  grpc::ServerUnaryReactor* GetSlotMap(grpc::CallbackServerContext* context,
                                       const v1::GetSlotMapRequest*,
                                       v1::SlotMap* response) override {
    {
      absl::MutexLock lock(&mu_);
      *response = map_;
    }
    auto* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
  void Set(uint64_t epoch, const std::string& address) {
    v1::ShardInfo shard;
    shard.set_id("s0");
    shard.set_address(address);
    v1::SlotMap map = SlotMap::Even({shard}, epoch)->proto();
    absl::MutexLock lock(&mu_);
    map_ = std::move(map);
  }

 private:
  absl::Mutex mu_;
  v1::SlotMap map_;
};

TEST(FetchRetentionsTest, AnOlderSlotMapDoesNotReplaceTheOneHeld) {
  MapStandIn stand_in;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&stand_in);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  const std::string address = absl::StrCat("127.0.0.1:", port);
  stand_in.Set(5, address);
  {
    auto client = GrpcSidecarClient::Create("", "sharded:" + address, TlsFiles(),
                                            RealClock::Get());
    ASSERT_TRUE(client.ok()) << client.status();
    EXPECT_EQ((*client)->FetchRetentions(10'000).size(), 1u);
    EXPECT_EQ((*client)->SlotMapEpoch("any.Service/Method"), 5u);
    // A shard that lags answers an older map: the route keeps epoch 5.
    stand_in.Set(3, address);
    (*client)->FetchRetentions(10'000);
    EXPECT_EQ((*client)->SlotMapEpoch("any.Service/Method"), 5u);
  }
  server->Shutdown();
}

}  // namespace
}  // namespace eonce
