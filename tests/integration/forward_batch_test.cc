// eonce.v1.Forwards, the sidecar's forwards many in one call: the real ledger's host
// serving it over real gRPC on a loopback port, with a real RocksDB directory, called
// directly and through the sidecar's GrpcUpstream.
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/base/clock.h"
#include "common/command/command.h"
#include "common/base/fault.h"
#include "common/rpc/grpc_status.h"
#include "common/base/hash.h"
#include "common/base/status.h"
#include "dedupe_sidecar/upstream/grpc_upstream.h"
#include "eonce/ledger/v1/ledger.pb.h"
#include "eonce/v1/outcome.grpc.pb.h"
#include "google/protobuf/unknown_field_set.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "services/ledger/ledger_service.h"
#include "tests/integration/ledger_calls.h"
#include "tests/util/held_open.h"
#include "tests/util/temp_dir.h"

namespace eonce {
namespace {

constexpr char kOpenAccount[] = "/eonce.ledger.v1.Ledger/OpenAccount";

// A forward that opens account `id` as command `command_id` of tenant acme.
ForwardCall OpenAccount(const std::string& command_id, const std::string& id) {
  ledger::v1::OpenAccountRequest request;
  request.set_id(id);
  request.set_initial_balance(100);
  ForwardCall call;
  call.method = kOpenAccount;
  call.request = request.SerializeAsString();
  call.command_id = command_id;
  call.idempotency_key = "key-" + command_id;
  call.tenant = "acme";
  call.actor = "alice";
  call.payload_sha256 = PayloadHashV1(call.method, call.request);
  call.fencing_token = 1;
  return call;
}

// `n` forwards, the i-th opening account `<account_prefix>i` as command
// `<command_prefix>i`.
std::vector<ForwardCall> OpenAccounts(const std::string& command_prefix,
                                      const std::string& account_prefix, int n) {
  std::vector<ForwardCall> calls;
  for (int i = 0; i < n; ++i) {
    calls.push_back(OpenAccount(command_prefix + std::to_string(i),
                                account_prefix + std::to_string(i)));
  }
  return calls;
}

// The account id an answered OpenAccount names; empty if it was not answered with one.
std::string AccountOf(const ForwardReply& reply) {
  ledger::v1::Account account;
  if (reply.kind != ForwardReply::Kind::kAnswered || reply.result.code() != 0 ||
      !account.ParseFromString(reply.result.response())) {
    return "";
  }
  return account.id();
}

// Holds each of the ledger's answers, once its effect is durable, at `gate` (a test that
// uses it makes it the ledger's fault injector).
class GatedAnswers : public FaultInjector {
 public:
  absl::Status Hit(FaultPoint point) override {
    if (point == FaultPoint::kAfterApplyBeforeResponse) gate.Hold();
    return absl::OkStatus();
  }

  testing::AnswerGate gate;
};

class ForwardBatchTest : public ::testing::Test {
 protected:
  void SetUp() override { StartLedger(/*serve_batches=*/true); }
  void TearDown() override { held_answers_.gate.LetAllGo(); }

  // `listen`: where the ledger listens; empty: a loopback port of its own.
  void StartLedger(bool serve_batches, const std::string& listen = "",
                   FaultInjector* faults = nullptr) {
    LedgerServerOptions options;
    options.data_dir = testing::FreshDir("ledger");
    options.faults = faults;
    if (!listen.empty()) options.listen_address = listen;
    if (serve_batches) {
      auto ledger = LedgerServer::Start(options, RealClock::Get());
      ASSERT_TRUE(ledger.ok()) << ledger.status();
      ledger_ = std::move(*ledger);
      address_ = "127.0.0.1:" + std::to_string(ledger_->port());
    } else {
      // The ledger without its in-process handlers: a host that serves no batches.
      ServiceHost::Setup setup = [](RocksStore& store,
                                    Inbox& inbox) -> absl::StatusOr<HostedService> {
        absl::StatusOr<HostedService> hosted = LedgerSetup()(store, inbox);
        if (hosted.ok()) hosted->handlers.clear();
        return hosted;
      };
      auto host =
          ServiceHost::Start(options, RealClock::Get(), LedgerCore::ColumnFamilies(), setup);
      ASSERT_TRUE(host.ok()) << host.status();
      host_ = std::move(*host);
      address_ = "127.0.0.1:" + std::to_string(host_->port());
    }
    if (!listen.empty()) address_ = listen;
    auto channel = grpc::CreateChannel(address_, grpc::InsecureChannelCredentials());
    forwards_ = v1::Forwards::NewStub(channel);
    effects_ = v1::Effects::NewStub(channel);
  }

  grpc::Status Batch(const std::vector<ForwardCall>& calls, v1::ForwardBatchResponse* response) {
    grpc::ClientContext context;
    context.AddMetadata(kComponentHeader, kSidecarComponent);  // as the sidecar calls it
    v1::ForwardBatchRequest request;
    for (const ForwardCall& call : calls) *request.add_calls() = ForwardedCallOf(call);
    return forwards_->ForwardBatch(&context, request, response);
  }

  // Forwards every call through `upstream` at once and returns the replies by call.
  static std::vector<ForwardReply> ForwardAll(GrpcUpstream& upstream,
                                              std::vector<ForwardCall> calls) {
    absl::Mutex mu;
    std::vector<ForwardReply> replies(calls.size());
    size_t left = calls.size();
    for (size_t i = 0; i < calls.size(); ++i) {
      calls[i].deadline_ms = RealClock::Get().NowMs() + 10'000;
      upstream.Forward(std::move(calls[i]), [&, i](ForwardReply reply) {
        absl::MutexLock lock(&mu);
        replies[i] = std::move(reply);
        --left;
      });
    }
    absl::MutexLock lock(&mu);
    mu.Await(absl::Condition(
        +[](size_t* n) { return *n == 0; }, &left));
    return replies;
  }

  GatedAnswers held_answers_;  // outlives the ledger, which may hold it
  std::unique_ptr<LedgerServer> ledger_;
  std::unique_ptr<ServiceHost> host_;
  std::string address_;  // the running ledger's
  std::unique_ptr<v1::Forwards::Stub> forwards_;
  std::unique_ptr<v1::Effects::Stub> effects_;
};

TEST_F(ForwardBatchTest, EachCallRunsOnceAndIsAnsweredInItsOwnPlace) {
  ForwardCall reused = OpenAccount("c1", "a9");  // c1's key with another payload
  ForwardCall missing = OpenAccount("c5", "a5");
  missing.method = "/eonce.ledger.v1.Ledger/Close";
  const std::vector<ForwardCall> calls = {OpenAccount("c1", "a1"), OpenAccount("c2", "a2"),
                                          OpenAccount("c3", "a3"), reused, missing};
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(round == 0 ? "first" : "resent");
    v1::ForwardBatchResponse response;
    grpc::Status status = Batch(calls, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    ASSERT_EQ(response.outcomes_size(), 5);
    for (int i = 0; i < 3; ++i) {
      ForwardReply reply = ForwardReplyOf(response.outcomes(i));
      EXPECT_EQ(AccountOf(reply), "a" + std::to_string(i + 1)) << i;
      EXPECT_TRUE(reply.inbox_kept) << i;
    }
    ForwardReply conflict = ForwardReplyOf(response.outcomes(3));
    EXPECT_EQ(conflict.kind, ForwardReply::Kind::kConflict);
    EXPECT_EQ(conflict.detail, "IDEMPOTENCY_CONFLICT");
    ForwardReply refused = ForwardReplyOf(response.outcomes(4));
    EXPECT_EQ(refused.kind, ForwardReply::Kind::kRefused);
    EXPECT_EQ(refused.result.code(), static_cast<int>(absl::StatusCode::kUnimplemented));
  }
  // Sent twice, each command applied once; the conflicting and the refused ones not at all.
  for (const char* id : {"c1", "c2", "c3"}) EXPECT_EQ(testing::EffectsOf(*effects_, id), 1) << id;
  EXPECT_EQ(testing::EffectsOf(*effects_, "c5"), 0);
}

TEST_F(ForwardBatchTest, EachItemCarriesItsOwnTraceToItsEffect) {
  ForwardCall traced = OpenAccount("t1", "ta");
  traced.trace.set_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  const std::vector<ForwardCall> calls = {traced, OpenAccount("t2", "tb")};
  v1::ForwardBatchResponse response;
  grpc::Status status = Batch(calls, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  grpc::ClientContext context;
  context.AddMetadata(kComponentHeader, "checker");
  v1::ListEffectsRequest request;
  request.set_limit(100);
  v1::ListEffectsResponse listed;
  ASSERT_TRUE(effects_->ListEffects(&context, request, &listed).ok());
  ASSERT_EQ(listed.effects_size(), 2);
  for (const v1::Effect& e : listed.effects()) {
    const bool is_traced = e.command_id() == "t1";
    EXPECT_EQ(e.trace_id(), is_traced ? "4bf92f3577b34da6a3ce929d0e0e4736" : "") << e.command_id();
    EXPECT_EQ(e.span_id(), is_traced ? "00f067aa0ba902b7" : "") << e.command_id();
  }
}

TEST_F(ForwardBatchTest, AMalformedBatchIsRefusedWholeBeforeAnythingRuns) {
  v1::ForwardBatchResponse response;
  EXPECT_EQ(Batch({}, &response).error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  std::vector<ForwardCall> too_many = OpenAccounts("m", "m", 65);
  EXPECT_EQ(Batch(too_many, &response).error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  ForwardCall bad_hash = OpenAccount("c2", "a2");
  bad_hash.payload_sha256 = "short";
  grpc::Status status = Batch({OpenAccount("c1", "a1"), bad_hash}, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("forward 1"), std::string::npos) << status.error_message();

  for (const char* id : {"c1", "c2", "m0", "m63"}) {
    EXPECT_EQ(testing::EffectsOf(*effects_, id), 0) << id;
  }
}

TEST_F(ForwardBatchTest, TheSidecarSendsTheForwardsThatWaitTogether) {
  // One call in flight at a time: the first forward goes alone, the ones behind it wait
  // and go together.
  GrpcUpstream upstream(address_, TlsFiles(), RealClock::Get(),
                        4 << 20, /*batch_calls=*/1);
  ASSERT_TRUE(upstream.AwaitCatalog(absl::Seconds(10)));
  ASSERT_EQ(upstream.Knows(kForwardBatchMethod), MethodKnown::kServed);
  std::vector<ForwardCall> calls = OpenAccounts("u", "acct", 40);
  std::vector<ForwardReply> replies = ForwardAll(upstream, calls);
  for (int i = 0; i < 40; ++i) {
    EXPECT_EQ(AccountOf(replies[i]), "acct" + std::to_string(i)) << i;
    EXPECT_TRUE(replies[i].inbox_kept) << i;
    EXPECT_EQ(testing::EffectsOf(*effects_, "u" + std::to_string(i)), 1) << i;
  }
  EXPECT_GT(upstream.forwards_batched(), 0u);
  EXPECT_LT(upstream.forwards_batched(), 40u);  // the first went alone
}

TEST_F(ForwardBatchTest, ABusinessThatServesNoBatchesGetsOneCallPerForward) {
  ledger_.reset();
  StartLedger(/*serve_batches=*/false);
  GrpcUpstream upstream(address_, TlsFiles(), RealClock::Get(),
                        4 << 20, /*batch_calls=*/1);
  ASSERT_TRUE(upstream.AwaitCatalog(absl::Seconds(10)));
  ASSERT_NE(upstream.Knows(kForwardBatchMethod), MethodKnown::kServed);
  std::vector<ForwardCall> calls = OpenAccounts("s", "solo", 10);
  std::vector<ForwardReply> replies = ForwardAll(upstream, calls);
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(AccountOf(replies[i]), "solo" + std::to_string(i)) << i;
    EXPECT_TRUE(replies[i].inbox_kept) << i;
  }
  EXPECT_EQ(upstream.forwards_batched(), 0u);
}

TEST_F(ForwardBatchTest, ABatchTheBusinessNoLongerServesRunsNothingAndSingleCallsFollow) {
  // The sidecar learns that the ledger serves batches; the ledger is then replaced, on the
  // same socket, by one that serves none, before the sidecar asks again.
  ledger_.reset();
  const std::string socket = "unix:" + testing::SocketDir() + "/ledger.sock";
  StartLedger(/*serve_batches=*/true, socket);
  GrpcUpstream upstream(address_, TlsFiles(), RealClock::Get(), 4 << 20, /*batch_calls=*/1);
  ASSERT_TRUE(upstream.AwaitCatalog(absl::Seconds(10)));
  ASSERT_EQ(upstream.Knows(kForwardBatchMethod), MethodKnown::kServed);
  ledger_.reset();
  StartLedger(/*serve_batches=*/false, socket);

  std::vector<ForwardCall> calls = OpenAccounts("r", "r", 20);
  std::vector<ForwardReply> replies = ForwardAll(upstream, calls);
  int refused_in_batches = 0;
  for (int i = 0; i < 20; ++i) {
    const std::string id = "r" + std::to_string(i);
    if (replies[i].kind == ForwardReply::Kind::kNotApplied) {
      // In a batch the business refused, or (a lone call) not connected yet: never run.
      refused_in_batches += replies[i].detail.find("batched") != std::string::npos;
      EXPECT_EQ(testing::EffectsOf(*effects_, id), 0) << id;
    } else {
      EXPECT_EQ(AccountOf(replies[i]), id) << replies[i].detail;
      EXPECT_EQ(testing::EffectsOf(*effects_, id), 1) << id;
    }
  }
  EXPECT_GT(refused_in_batches, 0);
  EXPECT_EQ(upstream.forwards_batched(), static_cast<uint64_t>(refused_in_batches));

  // Sent again (as the callers' retries would be): one call each, all applied once.
  replies = ForwardAll(upstream, calls);
  for (int i = 0; i < 20; ++i) {
    const std::string id = "r" + std::to_string(i);
    EXPECT_EQ(AccountOf(replies[i]), id) << replies[i].detail;
    EXPECT_EQ(testing::EffectsOf(*effects_, id), 1) << id;
  }
  EXPECT_EQ(upstream.forwards_batched(), static_cast<uint64_t>(refused_in_batches));
}


TEST_F(ForwardBatchTest, ABatchPastTheBusinesssMessageLimitGoesOneCallPerForward) {
  // Forwards of 1.5 MiB each, which the ledger's host (a 4 MiB message limit) takes one by
  // one; a sidecar allowed 10 MiB messages batches up to 5 MiB of them, three, past it.
  GrpcUpstream upstream(address_, TlsFiles(), RealClock::Get(), 10 << 20, /*batch_calls=*/1);
  ASSERT_TRUE(upstream.AwaitCatalog(absl::Seconds(10)));
  ASSERT_EQ(upstream.Knows(kForwardBatchMethod), MethodKnown::kServed);
  std::vector<ForwardCall> calls = OpenAccounts("big", "big", 8);
  for (ForwardCall& call : calls) {
    ledger::v1::OpenAccountRequest request;
    ASSERT_TRUE(request.ParseFromString(call.request));
    // A field the ledger does not know: it keeps the forward large and changes nothing.
    request.GetReflection()->MutableUnknownFields(&request)->AddLengthDelimited(
        1000, std::string(1536 << 10, 'x'));
    call.request = request.SerializeAsString();
    call.payload_sha256 = PayloadHashV1(call.method, call.request);
  }
  std::vector<ForwardReply> replies = ForwardAll(upstream, calls);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(AccountOf(replies[i]), "big" + std::to_string(i)) << replies[i].detail;
    EXPECT_TRUE(replies[i].inbox_kept) << i;
    EXPECT_EQ(testing::EffectsOf(*effects_, "big" + std::to_string(i)), 1) << i;
  }
  EXPECT_GT(upstream.forwards_split(), 0u) << "no batch was past the limit: this proves nothing";
}

// gRPC destroys a call's callback closure on its own thread after the callback returned,
// and with it the call's state, whose ClientContext owns a reference to the channel; the
// upstream's end must wait for that (common/rpc/call_tracker.h). The caller's callback object
// holds the closure open on gRPC's thread: the upstream's end does not return until it is
// let go (without the wait it returns at once). The ledger answers only once the call's
// start has returned, so that the closure is the last owner.
TEST_F(ForwardBatchTest, TheUpstreamsEndWaitsForEachCallsStateToGo) {
  StartLedger(/*serve_batches=*/true, "", &held_answers_);
  auto upstream = std::make_unique<GrpcUpstream>(address_, TlsFiles(), RealClock::Get(),
                                                 4 << 20);
  testing::ClosureHold hold;
  int attempt = 0;
  ASSERT_TRUE(hold.Take([&](std::shared_ptr<testing::HeldOpen> held,
                            std::function<void()> answered) {
    ForwardCall call = OpenAccount("held" + std::to_string(attempt++), "held");
    call.deadline_ms = RealClock::Get().NowMs() + 10'000;
    upstream->Forward(std::move(call), [held, answered](ForwardReply) { answered(); });
  }, [&] { held_answers_.gate.Answer(); })) << "no closure was held on gRPC's thread";
  EXPECT_FALSE(hold.EndedWhileHeld([&] { upstream.reset(); }))
      << "the upstream ended while a call's state, which owns its channel, was still alive";
}

}  // namespace
}  // namespace eonce
