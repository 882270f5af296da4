// Who may call a business port (services/inbox/caller_gate.h), on the real ledger in
// process: every service on the port -- Ledger, Effects, FollowUps, SlotData, Forwards,
// Outcome, and a method it does not even have -- admits eonce components and operators
// only, over mutual TLS from the certificate and over plaintext (a loopback port, the
// pod's socket) from what the caller states. Health checks and reflection stay open.
// Each refusal has its control: the same call as a component goes through.
#include <chrono>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/clock.h"
#include "common/command/command.h"
#include "common/rpc/grpc_status.h"
#include "common/base/status.h"
#include "common/rpc/tls.h"
#include "eonce/ledger/v1/ledger.grpc.pb.h"
#include "eonce/v1/outcome.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "services/ledger/ledger_service.h"
#include "tests/util/health_check.h"
#include "tests/util/temp_dir.h"
#include "tests/util/test_pki.h"

namespace eonce {
namespace {

using Headers = std::map<std::string, std::string>;

// One method of each service on the port, and one it does not have.
const std::vector<std::string>& Methods() {
  static const auto* methods = new std::vector<std::string>{
      "/eonce.ledger.v1.Ledger/GetTotal",         "/eonce.ledger.v1.Ledger/Transfer",
      "/eonce.v1.Effects/ListEffects",            "/eonce.v1.FollowUps/PullFollowUps",
      "/eonce.v1.FollowUps/AckFollowUps",         "/eonce.v1.SlotData/DropSlotData",
      "/eonce.v1.Forwards/ForwardBatch",          "/eonce.v1.Outcome/QueryOutcome",
      "/eonce.v1.NotServedHere/Anything"};
  return *methods;
}

std::shared_ptr<grpc::Channel> Dial(const std::string& address,
                                    std::shared_ptr<grpc::ChannelCredentials> credentials) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(address, std::move(credentials), args);
}

// "OK", or the code and eonce reason of the answer.
std::string Outcome(const grpc::Status& status, const grpc::ClientContext& context) {
  if (status.ok()) return "OK";
  absl::Status s = FromGrpcStatus(status, &context);
  return absl::StrCat(absl::StatusCodeToString(s.code()), " ", ReasonOf(s));
}

// Calls `method` with an empty request: what the port answers before (or instead of) the
// service's own checks.
std::string Call(grpc::GenericStub& stub, const std::string& method, const Headers& headers) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  for (const auto& [name, value] : headers) context.AddMetadata(name, value);
  grpc::ByteBuffer request, response;
  grpc::Slice empty("", 0);
  request = grpc::ByteBuffer(&empty, 1);
  std::promise<grpc::Status> done;
  stub.UnaryCall(&context, method, grpc::StubOptions(), &request, &response,
                 [&done](grpc::Status status) { done.set_value(std::move(status)); });
  return Outcome(done.get_future().get(), context);
}

std::map<std::string, std::string> CallEvery(const std::shared_ptr<grpc::Channel>& channel,
                                             const Headers& headers) {
  grpc::GenericStub stub(channel);
  std::map<std::string, std::string> out;
  for (const std::string& method : Methods()) out[method] = Call(stub, method, headers);
  return out;
}

void ExpectAllRefused(const std::map<std::string, std::string>& outcomes, const std::string& as) {
  for (const auto& [method, outcome] : outcomes) EXPECT_EQ(outcome, as) << method;
}

void ExpectAllAdmitted(const std::map<std::string, std::string>& outcomes) {
  for (const auto& [method, outcome] : outcomes) {
    EXPECT_EQ(outcome.find("UNAUTHENTICATED"), std::string::npos) << method << ": " << outcome;
    EXPECT_EQ(outcome.find("PERMISSION_DENIED"), std::string::npos) << method << ": " << outcome;
  }
  // Past the gate: the ledger answered (GetTotal needs nothing), and a method the port
  // does not serve is what it is.
  EXPECT_EQ(outcomes.at("/eonce.ledger.v1.Ledger/GetTotal"), "OK");
  EXPECT_EQ(outcomes.at("/eonce.v1.NotServedHere/Anything"), "UNIMPLEMENTED ");
}

// An operator reads its tenant's effects and outcomes; every other call is a component's.
void ExpectReadsOnly(const std::map<std::string, std::string>& outcomes) {
  for (const auto& [method, outcome] : outcomes) {
    if (method == "/eonce.v1.Effects/ListEffects" || method == "/eonce.v1.Outcome/QueryOutcome") {
      EXPECT_EQ(outcome.find("PERMISSION_DENIED"), std::string::npos) << method << ": " << outcome;
    } else {
      EXPECT_EQ(outcome, "PERMISSION_DENIED COMPONENT_REQUIRED") << method;
    }
  }
  EXPECT_EQ(outcomes.at("/eonce.v1.Effects/ListEffects"), "OK");
}

// The tenants whose effects a ListEffects by this caller shows.
std::map<std::string, int> EffectsSeen(const std::shared_ptr<grpc::Channel>& channel,
                                       const Headers& headers, std::string* outcome) {
  auto stub = v1::Effects::NewStub(channel);
  grpc::ClientContext context;
  for (const auto& [name, value] : headers) context.AddMetadata(name, value);
  v1::ListEffectsRequest request;
  request.set_limit(1000);
  v1::ListEffectsResponse response;
  *outcome = Outcome(stub->ListEffects(&context, request, &response), context);
  std::map<std::string, int> by_tenant;
  for (const auto& e : response.effects()) by_tenant[e.tenant()]++;
  return by_tenant;
}

class BusinessPortTest : public ::testing::Test {
 protected:
  void Start(const TlsFiles& tls) {
    LedgerServerOptions options;
    options.data_dir = testing::FreshDir("business-port");
    options.tls = tls;
    socket_ = testing::SocketDir() + "/ledger.sock";
    options.sidecar_socket = "unix:" + socket_;
    auto server = LedgerServer::Start(options, RealClock::Get());
    ASSERT_TRUE(server.ok()) << server.status();
    ledger_ = std::move(*server);
    port_ = "127.0.0.1:" + std::to_string(ledger_->port());
    // An account of each of two tenants, opened as the sidecar opens them.
    auto local = Dial("unix:" + socket_, grpc::InsecureChannelCredentials());
    auto stub = ledger::v1::Ledger::NewStub(local);
    for (const char* tenant : {"acme", "beta"}) {
      grpc::ClientContext context;
      context.AddMetadata(kComponentHeader, kSidecarComponent);
      context.AddMetadata(kTenantHeader, tenant);
      context.AddMetadata(kCommandIdHeader, absl::StrCat("open-", tenant));
      ledger::v1::OpenAccountRequest open;
      open.set_id(absl::StrCat(tenant, "-account"));
      open.set_initial_balance(10);
      ledger::v1::Account account;
      grpc::Status opened = stub->OpenAccount(&context, open, &account);
      ASSERT_TRUE(opened.ok()) << opened.error_message();
    }
  }

  std::unique_ptr<LedgerServer> ledger_;
  std::string port_;
  std::string socket_;
};

TEST_F(BusinessPortTest, OverPlaintextOnlyAComponentOrAnOperatorIsAdmitted) {
  Start(TlsFiles());
  for (const std::string& address : {port_, "unix:" + socket_}) {
    SCOPED_TRACE(address);
    auto channel = Dial(address, grpc::InsecureChannelCredentials());
    ExpectAllRefused(CallEvery(channel, {}), "UNAUTHENTICATED NO_IDENTITY");
    ExpectAllRefused(CallEvery(channel, {{kTenantHeader, "acme"}}), "UNAUTHENTICATED NO_IDENTITY");
    ExpectAllRefused(CallEvery(channel, {{kTenantHeader, "acme"}, {kWorkloadHeader, "payroll"}}),
                     "PERMISSION_DENIED BUSINESS_CALLER_NOT_ALLOWED");
    ExpectAllAdmitted(CallEvery(channel, {{kComponentHeader, "checker"}}));
    ExpectReadsOnly(CallEvery(channel, {{kOperatorHeader, "oncall"}, {kTenantHeader, "acme"}}));
    // Readiness and the services' shape are open to anyone.
    EXPECT_EQ(testing::HealthStatus(channel), 1);
    grpc::GenericStub stub(channel);
    EXPECT_EQ(Call(stub, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", {})
                  .find("UNAUTHENTICATED"),
              std::string::npos);
  }
  // A component reads every tenant's effects; an operator stating its tenant, its own.
  auto channel = Dial(port_, grpc::InsecureChannelCredentials());
  std::string outcome;
  EXPECT_EQ(EffectsSeen(channel, {{kComponentHeader, "checker"}}, &outcome),
            (std::map<std::string, int>{{"acme", 1}, {"beta", 1}}));
  EXPECT_EQ(outcome, "OK");
  EXPECT_EQ(EffectsSeen(channel, {{kOperatorHeader, "oncall"}, {kTenantHeader, "acme"}}, &outcome),
            (std::map<std::string, int>{{"acme", 1}}));
}

class BusinessPortTlsTest : public BusinessPortTest {
 protected:
  void SetUp() override {
    dir_ = testing::FreshDir("business-port-tls");
    auto pki = testing::TestPki::Create(dir_, "root");
    ASSERT_TRUE(pki.ok()) << pki.status();
    pki_ = std::make_unique<testing::TestPki>(*pki);
    Start(Issue("ledger", ""));
  }

  std::shared_ptr<grpc::Channel> As(const std::string& name, const std::string& uri) {
    return Dial(port_, ChannelCredentials(Issue(name, uri)));
  }

  TlsFiles Issue(const std::string& name, const std::string& uri) {
    auto files = pki_->Issue(name, uri);
    EXPECT_TRUE(files.ok()) << files.status();
    return files.ok() ? *files : TlsFiles();
  }

  std::string dir_;
  std::unique_ptr<testing::TestPki> pki_;
};

TEST_F(BusinessPortTlsTest, TheCertificateSaysWhoAndHeadersCannotChangeIt) {
  auto sidecar = As("sidecar", "spiffe://eonce.test/eonce/sidecar");
  auto workload = As("payroll", "spiffe://eonce.test/tenant/acme/workload/payroll");
  auto nobody = As("service", "spiffe://eonce.test/service/ledger");
  auto bare = As("bare", "");
  ExpectAllAdmitted(CallEvery(sidecar, {{kTenantHeader, "beta"}}));
  for (const auto* channel : {&workload, &nobody, &bare}) {
    // Claiming to be a component, or an operator, in a header changes nothing here.
    ExpectAllRefused(CallEvery(*channel, {{kComponentHeader, "sidecar"},
                                          {kOperatorHeader, "oncall"},
                                          {kTenantHeader, "acme"}}),
                     "PERMISSION_DENIED BUSINESS_CALLER_NOT_ALLOWED");
  }
  EXPECT_EQ(testing::HealthStatus(workload), 1);
}

TEST_F(BusinessPortTlsTest, AnOperatorActsForItsOwnTenantOnly) {
  auto oncall = As("oncall", "spiffe://eonce.test/tenant/acme/operator/oncall");
  std::string outcome;
  // Stating no tenant, it still sees its own tenant's effects and no one else's.
  EXPECT_EQ(EffectsSeen(oncall, {}, &outcome), (std::map<std::string, int>{{"acme", 1}}));
  EXPECT_EQ(outcome, "OK");
  EXPECT_EQ(EffectsSeen(oncall, {{kTenantHeader, "acme"}}, &outcome),
            (std::map<std::string, int>{{"acme", 1}}));
  EXPECT_TRUE(EffectsSeen(oncall, {{kTenantHeader, "beta"}}, &outcome).empty());
  EXPECT_EQ(outcome, "PERMISSION_DENIED TENANT_MISMATCH");
  // The control: the sidecar's certificate, which may act for any tenant, sees both.
  EXPECT_EQ(EffectsSeen(As("sidecar", "spiffe://eonce.test/eonce/sidecar"), {}, &outcome),
            (std::map<std::string, int>{{"acme", 1}, {"beta", 1}}));
}

}  // namespace
}  // namespace eonce
