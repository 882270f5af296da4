// Who may do what, with certificates made at test time: the workload comes from its
// certificate, the actor it states is accepted only where the policy lets that workload
// act for it, admin calls need an operator certificate, and pass-through calls are
// checked like commands. The sidecar is the real server with mutual TLS on loopback; the
// business is the real ledger on a unix socket in the test's folder, as in the pod.
// Every refusal has its negative control: the same call with the right identity works.
#include <sys/stat.h>

#include <chrono>
#include <fstream>
#include <map>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "common/base/clock.h"
#include "common/command/command.h"
#include "common/rpc/grpc_status.h"
#include "common/base/status.h"
#include "common/rpc/tls.h"
#include "dedupe_sidecar/doors/sidecar_service.h"
#include "eonce/ledger/v1/ledger.grpc.pb.h"
#include "eonce/v1/outcome.grpc.pb.h"
#include "eonce/v1/sidecar.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "services/ledger/ledger_service.h"
#include "tests/util/temp_dir.h"
#include "tests/util/test_pki.h"

namespace eonce {
namespace {

using testing::TestPki;

constexpr char kPolicy[] =
    "act acme payroll alice\n"
    "act acme relay *\n"
    "act beta shop *\n"
    "allow acme * *\n"
    "allow beta * *\n"
    "revoke acme mallory\n"
    "operator acme oncall\n"
    "operator beta oncall\n"
    "readonly /eonce.ledger.v1.Ledger/GetAccount\n"
    "readonly /eonce.v1.Effects/ListEffects\n";

std::string Workload(const std::string& tenant, const std::string& name) {
  return "spiffe://eonce.test/tenant/" + tenant + "/workload/" + name;
}

std::string Operator(const std::string& tenant, const std::string& name) {
  return "spiffe://eonce.test/tenant/" + tenant + "/operator/" + name;
}

// What a call came back with: "OK" or its eonce reason.
std::string Outcome(const grpc::Status& status, grpc::ClientContext& context) {
  if (status.ok()) return "OK";
  absl::Status s = FromGrpcStatus(status, &context);
  std::string reason = ReasonOf(s);
  return reason.empty() ? s.ToString() : reason;
}

class IdentityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::FreshDir("identity");
    auto pki = TestPki::Create(dir_, "root");
    ASSERT_TRUE(pki.ok()) << pki.status();
    pki_ = std::make_unique<TestPki>(*pki);

    socket_ = testing::SocketDir() + "/ledger.sock";
    LedgerServerOptions ledger;
    ledger.listen_address = "unix:" + socket_;
    ledger.data_dir = dir_ + "/ledger";
    auto started = LedgerServer::Start(ledger, RealClock::Get());
    ASSERT_TRUE(started.ok()) << started.status();
    ledger_ = std::move(*started);

    policy_ = dir_ + "/policy";
    std::ofstream(policy_) << kPolicy;
    sidecar_ = StartSidecar(policy_, "sidecar");
    ASSERT_NE(sidecar_, nullptr);
  }

  std::unique_ptr<SidecarServer> StartSidecar(const std::string& policy, const std::string& name) {
    SidecarServerOptions options;
    options.data_dir = dir_ + "/" + name;
    options.upstream_address = "unix:" + socket_;
    options.policy_file = policy;
    options.tls = Issue(name, "spiffe://eonce.test/eonce/sidecar");
    options.deduper.lease_ms = 2'000;
    options.deduper.forward_timeout_ms = 1'000;
    options.deduper.outcome_query_timeout_ms = 500;
    auto sidecar = SidecarServer::Start(options, RealClock::Get());
    EXPECT_TRUE(sidecar.ok()) << sidecar.status();
    return sidecar.ok() ? std::move(*sidecar) : nullptr;
  }

  TlsFiles Issue(const std::string& name, const std::string& id) {
    auto files = pki_->Issue(name, id);
    EXPECT_TRUE(files.ok()) << files.status();
    return files.ok() ? *files : TlsFiles();
  }

  std::shared_ptr<grpc::Channel> ChannelAs(const std::string& spiffe_id,
                                           SidecarServer* sidecar = nullptr) {
    std::string name = spiffe_id.substr(spiffe_id.rfind("tenant/") + 7);
    for (char& c : name) c = c == '/' ? '-' : c;
    TlsFiles files = Issue(name, spiffe_id);
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    return grpc::CreateCustomChannel(
        "127.0.0.1:" + std::to_string((sidecar != nullptr ? sidecar : sidecar_.get())->port()),
        ChannelCredentials(files), args);
  }

  static void Deadline(grpc::ClientContext& context) {
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  }

  static v1::Command OpenAccount(const std::string& account, const std::string& actor) {
    ledger::v1::OpenAccountRequest open;
    open.set_id(account);
    open.set_initial_balance(1'000'000);
    v1::Command c;
    c.set_command_id("open-" + account);
    c.set_target_method("/eonce.ledger.v1.Ledger/OpenAccount");
    c.set_request(open.SerializeAsString());
    c.set_actor(actor);
    c.mutable_entity()->set_type("account");
    c.mutable_entity()->set_id(account);
    c.set_idempotency_key(DeriveIdempotencyKey(c));
    FillPayloadHash(&c);
    return c;
  }

  std::string Submit(const std::shared_ptr<grpc::Channel>& channel, const v1::Command& command,
                     const std::map<std::string, std::string>& headers = {}) {
    auto stub = v1::Sidecar::NewStub(channel);
    grpc::ClientContext context;
    Deadline(context);
    for (const auto& [name, value] : headers) context.AddMetadata(name, value);
    v1::SubmitRequest request;
    *request.mutable_command() = command;
    v1::SubmitResponse response;
    return Outcome(stub->Submit(&context, request, &response), context);
  }

  // An unkeyed read through the sidecar (transparent mode).
  std::string GetAccount(const std::shared_ptr<grpc::Channel>& channel, const std::string& id,
                         const std::string& actor = "") {
    auto stub = ledger::v1::Ledger::NewStub(channel);
    grpc::ClientContext context;
    Deadline(context);
    if (!actor.empty()) context.AddMetadata(kActorHeader, actor);
    ledger::v1::GetAccountRequest get;
    get.set_id(id);
    ledger::v1::Account account;
    return Outcome(stub->GetAccount(&context, get, &account), context);
  }

  // The ground truth, from the business itself over its socket: does the account exist?
  bool AccountExists(const std::string& tenant, const std::string& id) {
    auto stub = ledger::v1::Ledger::NewStub(
        grpc::CreateChannel("unix:" + socket_, grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    Deadline(context);
    context.AddMetadata(kComponentHeader, "checker");  // the socket admits components
    context.AddMetadata(kTenantHeader, tenant);
    ledger::v1::GetAccountRequest get;
    get.set_id(id);
    ledger::v1::Account account;
    grpc::Status status = stub->GetAccount(&context, get, &account);
    EXPECT_TRUE(status.ok() || status.error_code() == grpc::StatusCode::NOT_FOUND)
        << status.error_message();
    return status.ok();
  }

  std::string dir_;
  std::string socket_;
  std::string policy_;
  std::unique_ptr<TestPki> pki_;
  std::unique_ptr<LedgerServer> ledger_;
  std::unique_ptr<SidecarServer> sidecar_;
};

TEST_F(IdentityTest, TheBusinessSocketIsForItsOwnUserOnly) {
  struct stat info;
  ASSERT_EQ(stat(socket_.c_str(), &info), 0);
  EXPECT_TRUE(S_ISSOCK(info.st_mode));
  EXPECT_EQ(info.st_mode & 0777, 0600u);
}

// Without a policy every workload may act for every actor, and every named operator is
// every tenant's platform operator: a development default, never one for a sidecar other
// hosts reach under mutual TLS.
TEST_F(IdentityTest, UnderMutualTlsASidecarNeedsAPolicy) {
  SidecarServerOptions options;
  options.data_dir = dir_ + "/no-policy";
  options.upstream_address = "unix:" + socket_;
  options.tls = Issue("no-policy", "spiffe://eonce.test/eonce/sidecar");
  auto refused = SidecarServer::Start(options, RealClock::Get());
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "--policy_file"))
      << refused.status();
  // In plaintext on loopback (local development) it starts, and says so in its log.
  options.tls = TlsFiles();
  options.data_dir = dir_ + "/no-policy-plaintext";
  options.listen_address = "127.0.0.1:0";
  EXPECT_TRUE(SidecarServer::Start(options, RealClock::Get()).ok());
}

// A leaked operator certificate is cut off by a revoke rule naming the operator: at the
// admin calls, and at Submit and the pass-through too, where the policy's act and allow
// rules name workloads and actors and an operator's certificate names neither.
TEST_F(IdentityTest, ARevokedOperatorDoesNothing) {
  const std::string before = dir_ + "/operators-policy";
  std::ofstream(before) << kPolicy << "operator acme gone\n";
  auto sidecar = StartSidecar(before, "sidecar-operators");
  ASSERT_NE(sidecar, nullptr);
  auto gone = ChannelAs(Operator("acme", "gone"), sidecar.get());
  ASSERT_EQ(Submit(gone, OpenAccount("g1", "")), "OK");
  ASSERT_TRUE(AccountExists("acme", "g1"));

  // The same certificate once a revoke rule names it (reloaded by the running sidecar).
  std::ofstream(before) << kPolicy << "operator acme gone\nrevoke acme gone\n";
  ASSERT_TRUE(sidecar->policy().MaybeReload().ok());
  EXPECT_EQ(Submit(gone, OpenAccount("g2", "")), "CREDENTIAL_REVOKED");
  EXPECT_FALSE(AccountExists("acme", "g2"));
  EXPECT_EQ(GetAccount(gone, "g1"), "CREDENTIAL_REVOKED");
  auto admin = v1::SidecarAdmin::NewStub(gone);
  grpc::ClientContext context;
  Deadline(context);
  v1::ListParkedRequest list;
  v1::ListParkedResponse parked;
  EXPECT_EQ(Outcome(admin->ListParked(&context, list, &parked), context), "CREDENTIAL_REVOKED");
  ASSERT_TRUE(sidecar->Shutdown(1000).ok());
}

TEST_F(IdentityTest, AWorkloadActsOnlyForTheActorsThePolicyNamesIt) {
  auto billing = ChannelAs(Workload("acme", "billing"));
  // The command says alice; billing may not act for her. Saying it is payroll in a header
  // changes nothing: under mutual TLS the certificate names the workload.
  EXPECT_EQ(Submit(billing, OpenAccount("alice-1", "alice"), {{kWorkloadHeader, "payroll"}}),
            "ACTOR_NOT_PERMITTED");
  // The refusal's standard details name who asked for whom.
  {
    auto stub = v1::Sidecar::NewStub(billing);
    grpc::ClientContext context;
    Deadline(context);
    v1::SubmitRequest request;
    *request.mutable_command() = OpenAccount("alice-1", "alice");
    v1::SubmitResponse response;
    absl::Status refused = FromGrpcStatus(stub->Submit(&context, request, &response), nullptr);
    EXPECT_EQ(ReasonOf(refused), "ACTOR_NOT_PERMITTED");
    EXPECT_EQ(ErrorMetadataOf(refused)["workload"], "billing");
    EXPECT_EQ(ErrorMetadataOf(refused)["actor"], "alice");
  }
  // The actor header is a statement like the command's field.
  v1::Command unstated = OpenAccount("alice-2", "");
  EXPECT_EQ(Submit(billing, unstated, {{kActorHeader, "alice"}}), "ACTOR_NOT_PERMITTED");
  EXPECT_FALSE(AccountExists("acme", "alice-1"));
  EXPECT_FALSE(AccountExists("acme", "alice-2"));
  // The negative control: payroll may act for alice, and billing may act as itself.
  auto payroll = ChannelAs(Workload("acme", "payroll"));
  EXPECT_EQ(Submit(payroll, OpenAccount("alice-1", "alice")), "OK");
  EXPECT_EQ(Submit(billing, unstated), "OK");
  EXPECT_TRUE(AccountExists("acme", "alice-1"));
  EXPECT_TRUE(AccountExists("acme", "alice-2"));
  // The ledger shows an account only to the tenant that opened it.
  EXPECT_FALSE(AccountExists("beta", "alice-1"));
  // A workload of another tenant is that tenant's, whatever it claims.
  auto shop = ChannelAs(Workload("beta", "shop"));
  EXPECT_EQ(Submit(shop, OpenAccount("alice-3", "alice"), {{kTenantHeader, "acme"}}),
            "TENANT_MISMATCH");
  EXPECT_FALSE(AccountExists("acme", "alice-3"));
}

TEST_F(IdentityTest, AdminCallsNeedAnOperatorCertificate) {
  auto relay = ChannelAs(Workload("acme", "relay"));
  auto oncall = ChannelAs(Operator("acme", "oncall"));
  auto stranger = ChannelAs(Operator("acme", "intern"));  // not named by the policy
  auto calls = [](const std::shared_ptr<grpc::Channel>& channel) {
    auto admin = v1::SidecarAdmin::NewStub(channel);
    // Each call also claims the operator role in a header: ignored under mutual TLS.
    auto claiming = [] {
      auto context = std::make_unique<grpc::ClientContext>();
      Deadline(*context);
      context->AddMetadata(kOperatorHeader, "oncall");
      return context;
    };
    std::map<std::string, std::string> out;
    auto list = claiming();
    v1::ListParkedResponse parked;
    out["ListParked"] =
        Outcome(admin->ListParked(list.get(), v1::ListParkedRequest(), &parked), *list);
    auto resolve = claiming();
    v1::ResolveParkedRequest resolution;
    resolution.set_idempotency_key("no-such-key");
    resolution.set_applied(false);
    resolution.set_operator_note("checked the ledger");
    v1::ResolveParkedResponse resolved;
    out["ResolveParked"] =
        Outcome(admin->ResolveParked(resolve.get(), resolution, &resolved), *resolve);
    auto query = claiming();
    v1::QueryAuditRequest audit_request;
    audit_request.set_command_id("open-x");
    v1::QueryAuditResponse events;
    out["QueryAudit"] = Outcome(admin->QueryAudit(query.get(), audit_request, &events), *query);
    auto verify = claiming();
    v1::VerifyAuditResponse verified;
    out["VerifyAudit"] =
        Outcome(admin->VerifyAudit(verify.get(), v1::VerifyAuditRequest(), &verified), *verify);
    return out;
  };
  // The whole audit chain is every tenant's: verifying it is a platform operator's call.
  auto refusal = [](const std::string& call) {
    return call == "VerifyAudit" ? "PLATFORM_OPERATOR_REQUIRED" : "OPERATOR_REQUIRED";
  };
  for (const auto& [call, outcome] : calls(relay)) {
    EXPECT_EQ(outcome, refusal(call)) << call;
  }
  for (const auto& [call, outcome] : calls(stranger)) {
    EXPECT_EQ(outcome, refusal(call)) << call;
  }
  auto allowed = calls(oncall);
  EXPECT_EQ(allowed["ListParked"], "OK");
  EXPECT_EQ(allowed["QueryAudit"], "OK");
  EXPECT_EQ(allowed["VerifyAudit"], "PLATFORM_OPERATOR_REQUIRED");
  // Past the role check: there is nothing parked under that key.
  EXPECT_NE(allowed["ResolveParked"], "OPERATOR_REQUIRED");
  EXPECT_NE(allowed["ResolveParked"], "OK");
}

TEST_F(IdentityTest, PassThroughIsCheckedAgainstTheCertificateAndThePolicy) {
  auto payroll = ChannelAs(Workload("acme", "payroll"));
  auto billing = ChannelAs(Workload("acme", "billing"));
  auto relay = ChannelAs(Workload("acme", "relay"));
  ASSERT_EQ(Submit(payroll, OpenAccount("a", "alice")), "OK");

  EXPECT_EQ(GetAccount(payroll, "a", "alice"), "OK");  // the right identity reads
  EXPECT_EQ(GetAccount(billing, "a"), "OK");           // a workload as itself
  EXPECT_EQ(GetAccount(billing, "a", "alice"), "ACTOR_NOT_PERMITTED");
  // A revoked actor's unkeyed read, through a workload that may act for anyone.
  EXPECT_EQ(GetAccount(relay, "a", "mallory"), "CREDENTIAL_REVOKED");
  EXPECT_EQ(GetAccount(relay, "a", "bob"), "OK");

  // A mutation without a key is refused, whoever asks; nothing is opened.
  {
    auto stub = ledger::v1::Ledger::NewStub(payroll);
    grpc::ClientContext context;
    Deadline(context);
    context.AddMetadata(kActorHeader, "alice");
    ledger::v1::OpenAccountRequest open;
    open.set_id("unkeyed");
    open.set_initial_balance(1'000'000);
    ledger::v1::Account account;
    EXPECT_EQ(Outcome(stub->OpenAccount(&context, open, &account), context),
              "IDEMPOTENCY_KEY_REQUIRED");
  }
  EXPECT_FALSE(AccountExists("acme", "unkeyed"));

  // A policy that lists no method readonly: the same read is refused. (Without a policy
  // file nothing is read-only either, but under mutual TLS a sidecar does not start
  // without one: UnderMutualTlsASidecarNeedsAPolicy.)
  const std::string no_readonly = dir_ + "/no-readonly-policy";
  std::ofstream(no_readonly) << "act acme payroll *\nallow acme * *\n";
  auto open_sidecar = StartSidecar(no_readonly, "sidecar-without-policy");
  ASSERT_NE(open_sidecar, nullptr);
  EXPECT_EQ(GetAccount(ChannelAs(Workload("acme", "payroll"), open_sidecar.get()), "a", "alice"),
            "IDEMPOTENCY_KEY_REQUIRED");
  ASSERT_TRUE(open_sidecar->Shutdown(1000).ok());
}

// The business's effects, read by an operator through SidecarAdmin: only its own tenant's.
TEST_F(IdentityTest, EffectsThroughTheSidecarStayInsideTheOperatorsTenant) {
  ASSERT_EQ(Submit(ChannelAs(Workload("acme", "payroll")), OpenAccount("a", "alice")), "OK");
  ASSERT_EQ(Submit(ChannelAs(Workload("beta", "shop")), OpenAccount("b", "bob")), "OK");
  auto list = [&](const std::shared_ptr<grpc::Channel>& channel,
                  std::map<std::string, int>* by_tenant) {
    auto stub = v1::SidecarAdmin::NewStub(channel);
    grpc::ClientContext context;
    Deadline(context);
    v1::ListEffectsRequest request;
    request.set_limit(1000);
    v1::ListEffectsResponse response;
    std::string outcome = Outcome(stub->ListEffects(&context, request, &response), context);
    for (const auto& e : response.effects()) (*by_tenant)[e.tenant()]++;
    return outcome;
  };
  std::map<std::string, int> seen;
  EXPECT_EQ(list(ChannelAs(Workload("beta", "shop")), &seen), "OPERATOR_REQUIRED");
  EXPECT_TRUE(seen.empty());
  EXPECT_EQ(list(ChannelAs(Operator("beta", "oncall")), &seen), "OK");
  EXPECT_EQ(seen, (std::map<std::string, int>{{"beta", 1}}));
  seen.clear();
  EXPECT_EQ(list(ChannelAs(Operator("acme", "oncall")), &seen), "OK");
  EXPECT_EQ(seen, (std::map<std::string, int>{{"acme", 1}}));

  // Never through transparent mode, though the policy lists ListEffects readonly: the
  // effect ledger is eonce's own service of the business, not one of its methods.
  auto effects = v1::Effects::NewStub(ChannelAs(Operator("acme", "oncall")));
  grpc::ClientContext context;
  Deadline(context);
  v1::ListEffectsResponse response;
  EXPECT_EQ(Outcome(effects->ListEffects(&context, v1::ListEffectsRequest(), &response), context),
            "RESERVED_METHOD");
  EXPECT_EQ(response.effects_size(), 0);
}

}  // namespace
}  // namespace eonce
