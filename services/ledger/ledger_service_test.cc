// The ledger over real gRPC on a loopback port, in both modes.
#include "services/ledger/ledger_service.h"

#include <sys/stat.h>

#include "absl/strings/str_cat.h"
#include "common/command/command.h"
#include "eonce/v1/outcome.grpc.pb.h"
#include "google/rpc/error_details.pb.h"
#include "google/rpc/status.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "tests/util/http_get.h"
#include "tests/util/temp_dir.h"

namespace eonce {
namespace {

class LedgerServiceTest : public ::testing::Test {
 protected:
  void Start(bool legacy) {
    LedgerServerOptions options;
    options.data_dir = testing::FreshDir("ledger_service");
    options.legacy_mode = legacy;
    options.metrics_address = "127.0.0.1:0";
    options.metrics_name = "ledger";
    auto server = LedgerServer::Start(options, clock_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    channel_ = grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->port()),
                                   grpc::InsecureChannelCredentials());
    ledger_ = ledger::v1::Ledger::NewStub(channel_);
    outcome_ = v1::Outcome::NewStub(channel_);
  }

  void AddIdentity(grpc::ClientContext* context, const std::string& command_id) {
    context->AddMetadata(kCommandIdHeader, command_id);
    context->AddMetadata(kTenantHeader, "acme");
    context->AddMetadata(kActorHeader, "alice");
  }

  grpc::Status Open(const std::string& id, int64_t balance) {
    grpc::ClientContext context;
    context.AddMetadata(kComponentHeader, "sidecar");  // as the sidecar does
    AddIdentity(&context, "open-" + id);
    ledger::v1::OpenAccountRequest request;
    request.set_id(id);
    request.set_initial_balance(balance);
    ledger::v1::Account account;
    return ledger_->OpenAccount(&context, request, &account);
  }

  grpc::Status Transfer(const std::string& command_id, int64_t amount,
                        ledger::v1::TransferResponse* response) {
    grpc::ClientContext context;
    context.AddMetadata(kComponentHeader, "sidecar");  // as the sidecar does
    AddIdentity(&context, command_id);
    ledger::v1::TransferRequest request;
    request.set_from("a");
    request.set_to("b");
    request.set_amount(amount);
    return ledger_->Transfer(&context, request, response);
  }

  ManualClock clock_;
  std::unique_ptr<LedgerServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<ledger::v1::Ledger::Stub> ledger_;
  std::unique_ptr<v1::Outcome::Stub> outcome_;
};

TEST_F(LedgerServiceTest, AnAccountCacheBeyondItsBoundIsRefusedAtStart) {
  LedgerServerOptions options;
  options.data_dir = testing::FreshDir("ledger_service");
  options.ledger.account_cache_entries = AccountCache::kMaxEntries + 1;
  auto server = LedgerServer::Start(options, clock_);
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(server.status().message().find("account_cache_entries"), std::string::npos);
}

TEST_F(LedgerServiceTest, DuplicateCallReturnsStoredAnswerAndOutcomeIsExact) {
  Start(/*legacy=*/false);
  ASSERT_TRUE(Open("a", 100).ok());
  ASSERT_TRUE(Open("b", 0).ok());
  ledger::v1::TransferResponse first, second;
  ASSERT_TRUE(Transfer("cmd-1", 40, &first).ok());
  ASSERT_TRUE(Transfer("cmd-1", 40, &second).ok());
  EXPECT_EQ(first.SerializeAsString(), second.SerializeAsString());
  EXPECT_EQ(first.from_balance(), 60);

  grpc::ClientContext context;
  context.AddMetadata(kComponentHeader, "sidecar");  // as the sidecar does
  context.AddMetadata(kTenantHeader, "acme");
  v1::QueryOutcomeRequest request;
  request.set_command_id("cmd-1");
  v1::QueryOutcomeResponse outcome;
  ASSERT_TRUE(outcome_->QueryOutcome(&context, request, &outcome).ok());
  EXPECT_TRUE(outcome.applied());
  EXPECT_EQ(outcome.result().response(), first.SerializeAsString());

  grpc::ClientContext total_context;
  total_context.AddMetadata(kComponentHeader, "sidecar");  // as the sidecar does
  ledger::v1::GetTotalResponse total;
  ASSERT_TRUE(ledger_->GetTotal(&total_context, ledger::v1::GetTotalRequest(), &total).ok());
  EXPECT_EQ(total.total_balance(), 100);
  EXPECT_EQ(total.total_minted(), 100);
}

// A business that also serves its sidecar on a unix socket: the same services over the
// same store on both (a transfer sent on the socket is a repeat on the port), the socket
// open to its own user only; an address that is not a unix socket is refused at start.
TEST_F(LedgerServiceTest, ServesItsSidecarOnAUnixSocketBesideItsPort) {
  LedgerServerOptions options;
  options.data_dir = testing::FreshDir("ledger_service");
  const std::string path = testing::SocketDir() + "/ledger-sidecar.sock";
  options.sidecar_socket = "unix:" + path;
  auto server = LedgerServer::Start(options, clock_);
  ASSERT_TRUE(server.ok()) << server.status();
  server_ = std::move(*server);
  ledger_ = ledger::v1::Ledger::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(server_->port()), grpc::InsecureChannelCredentials()));
  ASSERT_TRUE(Open("a", 100).ok());
  ASSERT_TRUE(Open("b", 0).ok());
  auto port_stub = std::move(ledger_);
  ledger_ = ledger::v1::Ledger::NewStub(
      grpc::CreateChannel("unix:" + path, grpc::InsecureChannelCredentials()));
  ledger::v1::TransferResponse on_socket, on_port;
  ASSERT_TRUE(Transfer("cmd-local", 30, &on_socket).ok());
  EXPECT_EQ(on_socket.from_balance(), 70);
  ledger_ = std::move(port_stub);
  ASSERT_TRUE(Transfer("cmd-local", 30, &on_port).ok());
  EXPECT_EQ(on_port.SerializeAsString(), on_socket.SerializeAsString());
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600);

  LedgerServerOptions tcp_as_socket;
  tcp_as_socket.data_dir = testing::FreshDir("ledger_service");
  tcp_as_socket.sidecar_socket = "127.0.0.1:0";
  auto refused = LedgerServer::Start(tcp_as_socket, clock_);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("unix:/path"), std::string::npos);
}

TEST_F(LedgerServiceTest, MetricsCountEffectsRepeatsAndRejectionsAndPassPromtool) {
  Start(/*legacy=*/false);
  ASSERT_TRUE(Open("a", 10).ok());
  ASSERT_TRUE(Open("b", 0).ok());
  ledger::v1::TransferResponse response;
  ASSERT_TRUE(Transfer("t1", 5, &response).ok());
  ASSERT_TRUE(Transfer("t1", 5, &response).ok());  // a repeat: no effect
  EXPECT_FALSE(Transfer("t2", 500, &response).ok());  // too little balance
  std::string text = testing::HttpGet(server_->metrics_port(), "/metrics");
  EXPECT_NE(text.find("eonce_ledger_effects_applied_total 3"), std::string::npos) << text;
  EXPECT_NE(text.find("eonce_ledger_inbox_repeats_total 1"), std::string::npos) << text;
  EXPECT_NE(text.find("eonce_ledger_rejections_total 1"), std::string::npos) << text;
  // The two opens found nothing; both transfers read both accounts from memory.
  EXPECT_NE(text.find("eonce_ledger_account_cache_lookups_total{result=\"hit\"} 4"),
            std::string::npos) << text;
  EXPECT_NE(text.find("eonce_ledger_account_cache_lookups_total{result=\"miss\"} 2"),
            std::string::npos) << text;
  EXPECT_NE(text.find("eonce_ledger_account_cache_entries 2"), std::string::npos) << text;
  EXPECT_NE(text.find("eonce_ledger_ready 1"), std::string::npos) << text;
  std::string output;
  int promtool = testing::PromtoolCheck(text, &output);
  if (promtool == -1) GTEST_SKIP() << "promtool is not installed (tools/setup.sh installs it)";
  EXPECT_EQ(promtool, 0) << output;
}

// One call at a time, each mutation's handler syncs the store on its own thread: no
// hand-off to the committer thread and back while the store is quiet.
TEST_F(LedgerServiceTest, OneCallAtATimeIsSyncedOnItsHandlersThread) {
  Start(/*legacy=*/false);
  ASSERT_TRUE(Open("a", 100).ok());
  ASSERT_TRUE(Open("b", 0).ok());
  constexpr int kTransfers = 10;
  for (int i = 0; i < kTransfers; ++i) {
    ledger::v1::TransferResponse response;
    ASSERT_TRUE(Transfer(absl::StrCat("t", i), 1, &response).ok());
    EXPECT_EQ(response.from_balance(), 99 - i);
  }
  std::string text = testing::HttpGet(server_->metrics_port(), "/metrics");
  const std::string name = "\neonce_ledger_syncs_on_caller_total ";
  size_t at = text.find(name);
  ASSERT_NE(at, std::string::npos) << text;
  // Each write was synced by its own call (a health probe's synced write may make one
  // more sync necessary, never one fewer).
  EXPECT_GE(std::stod(text.substr(at + name.size())), 2 + kTransfers) << text;
}

// The rejection travels in gRPC's standard richer error model, decoded here the way any
// gRPC library would: a google.rpc.Status with an ErrorInfo and the eonce.v1.Rejection.
TEST_F(LedgerServiceTest, RejectionCarriesItsReasonInTheStandardErrorDetails) {
  Start(/*legacy=*/false);
  ASSERT_TRUE(Open("a", 10).ok());
  ASSERT_TRUE(Open("b", 0).ok());
  ledger::v1::TransferResponse response;
  grpc::Status status = Transfer("too-much", 11, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  google::rpc::Status rich;
  ASSERT_TRUE(rich.ParseFromString(status.error_details()));
  EXPECT_EQ(rich.code(), static_cast<int>(grpc::StatusCode::FAILED_PRECONDITION));
  bool info_seen = false, rejection_seen = false;
  for (const auto& any : rich.details()) {
    if (any.type_url() == "type.googleapis.com/google.rpc.ErrorInfo") {
      google::rpc::ErrorInfo info;
      ASSERT_TRUE(any.UnpackTo(&info));
      EXPECT_EQ(info.reason(), "INSUFFICIENT_FUNDS");
      EXPECT_EQ(info.domain(), "eonce.io");
      info_seen = true;
    }
    if (any.type_url() == "type.googleapis.com/eonce.v1.Rejection") {
      v1::Rejection rejection;
      ASSERT_TRUE(any.UnpackTo(&rejection));
      EXPECT_EQ(rejection.reason(), "INSUFFICIENT_FUNDS");
      rejection_seen = true;
    }
  }
  EXPECT_TRUE(info_seen);
  EXPECT_TRUE(rejection_seen);
}

TEST_F(LedgerServiceTest, LegacyModeAppliesTwiceAndHasNoOutcomeService) {
  Start(/*legacy=*/true);
  ASSERT_TRUE(Open("a", 100).ok());
  ASSERT_TRUE(Open("b", 0).ok());
  ledger::v1::TransferResponse first, second;
  ASSERT_TRUE(Transfer("cmd-1", 40, &first).ok());
  ASSERT_TRUE(Transfer("cmd-1", 40, &second).ok());
  EXPECT_EQ(second.from_balance(), 20);

  grpc::ClientContext context;
  context.AddMetadata(kComponentHeader, "sidecar");  // as the sidecar does
  v1::QueryOutcomeRequest request;
  request.set_command_id("cmd-1");
  v1::QueryOutcomeResponse outcome;
  EXPECT_EQ(outcome_->QueryOutcome(&context, request, &outcome).error_code(),
            grpc::StatusCode::UNIMPLEMENTED);
}

}  // namespace
}  // namespace eonce
