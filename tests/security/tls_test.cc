// Mutual TLS on every hop, with the real binaries: producer -> outbox_agent ->
// dedupe_sidecar -> ledger_service, each with its own certificate from a CA made at test
// time. Checks who gets in (no certificate, another CA, an expired certificate: no),
// that the tenant comes from the certificate, that Reconcile and the audit log stay
// inside a tenant, and that changed certificate files are used for new connections
// without a restart.
#include "common/rpc/tls.h"

#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/base/clock.h"
#include "common/command/command.h"
#include "common/rpc/grpc_status.h"
#include "common/base/status.h"
#include "dedupe_sidecar/doors/sidecar_service.h"
#include "eonce/ledger/v1/ledger.grpc.pb.h"
#include "eonce/v1/agent.grpc.pb.h"
#include "eonce/v1/outcome.grpc.pb.h"
#include "eonce/v1/sidecar.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "tests/util/agent_wait.h"
#include "tests/util/health_check.h"
#include "tests/util/process.h"
#include "tests/util/temp_dir.h"
#include "tests/util/test_pki.h"

namespace eonce {
namespace {

using testing::TenantId;
using testing::TestPki;

std::vector<std::string> TlsArgs(const TlsFiles& f) {
  return {"--tls_cert=" + f.cert_file, "--tls_key=" + f.key_file, "--tls_ca=" + f.ca_file,
          "--tls_refresh_s=1"};
}

// A channel of its own (no connection shared with other channels), so every call below
// makes a fresh TLS handshake.
std::shared_ptr<grpc::Channel> FreshChannel(const std::string& address,
                                            std::shared_ptr<grpc::ChannelCredentials> creds) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(address, std::move(creds), args);
}

std::shared_ptr<grpc::ChannelCredentials> Mtls(const TlsFiles& files) {
  return ChannelCredentials(files);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::unique_ptr<grpc::ClientContext> Context(int64_t timeout_ms = 5000) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms));
  return context;
}

v1::Command OpenAccount(const std::string& id, const std::string& tenant = "") {
  ledger::v1::OpenAccountRequest open;
  open.set_id(id);
  open.set_initial_balance(100);
  v1::Command c;
  c.set_command_id("open-" + id);
  c.set_target_method("/eonce.ledger.v1.Ledger/OpenAccount");
  c.set_request(open.SerializeAsString());
  c.set_actor("teller");
  c.set_tenant(tenant);
  c.mutable_entity()->set_type("account");
  c.mutable_entity()->set_id(id);
  c.set_idempotency_key(DeriveIdempotencyKey(c));
  FillPayloadHash(&c);
  return c;
}

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::FreshDir("tls");
    auto pki = TestPki::Create(dir_, "root");
    ASSERT_TRUE(pki.ok()) << pki.status();
    pki_ = std::make_unique<TestPki>(*pki);
    ledger_tls_ = Issue(*pki_, "ledger", "spiffe://eonce.test/service/ledger");
    // The sidecar calls the ledger over mutual TLS as the eonce component it is.
    sidecar_tls_ = Issue(*pki_, "sidecar", "spiffe://eonce.test/eonce/sidecar");
    acme_ = Issue(*pki_, "acme-agent", TenantId("acme", "agent"));
    globex_ = Issue(*pki_, "globex-agent", TenantId("globex", "agent"));

    std::vector<std::string> ledger_args = {"--listen=127.0.0.1:0",
                                            "--data_dir=" + dir_ + "/ledger"};
    for (auto& a : TlsArgs(ledger_tls_)) ledger_args.push_back(a);
    auto ledger =
        Process::Start("services/ledger/ledger_service", ledger_args, dir_ + "/ledger.log");
    ASSERT_TRUE(ledger.ok()) << ledger.status();
    ledger_ = std::move(*ledger);

    // The sidecar's CA file is its own copy, so a test can change what it trusts.
    sidecar_ca_ = dir_ + "/sidecar-ca.pem";
    std::ofstream(sidecar_ca_) << ReadFile(pki_->ca_file());
    TlsFiles sidecar_files = sidecar_tls_;
    sidecar_files.ca_file = sidecar_ca_;
    // Under mutual TLS a sidecar takes no call without a policy: each tenant's agent acts
    // for its tellers, and each tenant has its operator.
    const std::string policy = dir_ + "/policy";
    std::ofstream(policy) << "act acme agent *\nact globex agent *\nallow acme * *\n"
                             "allow globex * *\noperator acme oncall\noperator globex oncall\n";
    std::vector<std::string> sidecar_args = {
        "--listen=127.0.0.1:0", "--data_dir=" + dir_ + "/sidecar",
        "--upstream=" + ledger_->address(), "--lease_ms=2000", "--forward_timeout_ms=1000",
        "--outcome_query_timeout_ms=500", "--policy_file=" + policy};
    for (auto& a : TlsArgs(sidecar_files)) sidecar_args.push_back(a);
    auto sidecar =
        Process::Start("dedupe_sidecar/dedupe_sidecar", sidecar_args, dir_ + "/sidecar.log");
    ASSERT_TRUE(sidecar.ok()) << sidecar.status();
    sidecar_ = std::move(*sidecar);
  }

  TlsFiles Issue(const TestPki& pki, const std::string& name, const std::string& id, int days = 2) {
    auto files = pki.Issue(name, id, days);
    EXPECT_TRUE(files.ok()) << files.status();
    return files.ok() ? *files : TlsFiles();
  }

  void StartAgent() {
    std::vector<std::string> args = {"--listen=127.0.0.1:0", "--data_dir=" + dir_ + "/agent",
                                     "--tenant=acme",        "--sidecar=" + sidecar_->address(),
                                     "--base_backoff_ms=20", "--max_backoff_ms=200"};
    for (auto& a : TlsArgs(acme_)) args.push_back(a);
    auto agent = Process::Start("outbox_agent/outbox_agent", args, dir_ + "/agent.log");
    ASSERT_TRUE(agent.ok()) << agent.status();
    agent_ = std::move(*agent);
  }

  grpc::Status Submit(const std::shared_ptr<grpc::ChannelCredentials>& creds,
                      const v1::Command& command, const std::string& claimed_tenant = "") {
    auto stub = v1::Sidecar::NewStub(FreshChannel(sidecar_->address(), creds));
    auto context = Context();
    if (!claimed_tenant.empty()) context->AddMetadata(kTenantHeader, claimed_tenant);
    v1::SubmitRequest request;
    *request.mutable_command() = command;
    v1::SubmitResponse response;
    return stub->Submit(context.get(), request, &response);
  }

  grpc::Status GetInfo(const std::shared_ptr<grpc::ChannelCredentials>& creds,
                       v1::GetInfoResponse* response = nullptr) {
    auto stub = v1::Sidecar::NewStub(FreshChannel(sidecar_->address(), creds));
    auto context = Context(3000);
    v1::GetInfoResponse ignored;
    return stub->GetInfo(context.get(), v1::GetInfoRequest(),
                         response != nullptr ? response : &ignored);
  }

  // The ground truth: how many effects the ledger recorded, read with the sidecar's
  // certificate (a business port admits eonce components and operators).
  int Effects() {
    auto stub = v1::Effects::NewStub(FreshChannel(ledger_->address(), Mtls(sidecar_tls_)));
    auto context = Context();
    v1::ListEffectsRequest request;
    request.set_limit(1000);
    v1::ListEffectsResponse response;
    grpc::Status s = stub->ListEffects(context.get(), request, &response);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return response.effects_size();
  }

  std::string dir_;
  std::unique_ptr<TestPki> pki_;
  TlsFiles ledger_tls_, sidecar_tls_, acme_, globex_;
  std::string sidecar_ca_;
  std::unique_ptr<Process> ledger_, sidecar_, agent_;
};

TEST_F(TlsTest, EveryHopIsMutualTlsAndTheCommandIsAppliedOnce) {
  StartAgent();
  TlsFiles producer = Issue(*pki_, "acme-producer", TenantId("acme", "producer"));
  auto agent = v1::Agent::NewStub(FreshChannel(agent_->address(), Mtls(producer)));
  v1::EnqueueRequest enqueue;
  *enqueue.mutable_command() = OpenAccount("alice");
  enqueue.mutable_command()->clear_idempotency_key();
  enqueue.mutable_command()->clear_payload_hash();
  v1::EnqueueResponse enqueued;
  auto context = Context();
  grpc::Status s = agent->Enqueue(context.get(), enqueue, &enqueued);
  ASSERT_TRUE(s.ok()) << s.error_message();

  absl::StatusOr<v1::OutboxRecord> record = testing::WaitUntilFinal(*agent, "open-alice");
  ASSERT_TRUE(record.ok()) << record.status();
  EXPECT_EQ(record->state(), v1::ACKED) << record->DebugString();
  EXPECT_EQ(Effects(), 1);

  // No hop speaks plaintext.
  for (const std::string& address : {agent_->address(), sidecar_->address(), ledger_->address()}) {
    auto health = v1::Agent::NewStub(FreshChannel(address, grpc::InsecureChannelCredentials()));
    auto c = Context(2000);
    v1::StatsResponse stats;
    EXPECT_EQ(health->Stats(c.get(), v1::StatsRequest(), &stats).error_code(),
              grpc::StatusCode::UNAVAILABLE)
        << address;
  }
}

TEST_F(TlsTest, CallersWithoutAValidCertificateAreRefused) {
  auto other = TestPki::Create(dir_, "other");
  ASSERT_TRUE(other.ok()) << other.status();
  TlsFiles wrong_ca = Issue(*other, "acme-agent", TenantId("acme", "agent"));
  wrong_ca.ca_file = pki_->ca_file();  // it trusts the right server, but is not trusted
  TlsFiles expired = Issue(*pki_, "acme-expired", TenantId("acme", "agent"), /*days=*/-1);
  grpc::SslCredentialsOptions server_only;
  server_only.pem_root_certs = ReadFile(pki_->ca_file());

  struct Caller {
    const char* what;
    std::shared_ptr<grpc::ChannelCredentials> creds;
  };
  std::vector<Caller> refused = {{"plaintext", grpc::InsecureChannelCredentials()},
                                 {"no client certificate", grpc::SslCredentials(server_only)},
                                 {"certificate from another CA", Mtls(wrong_ca)},
                                 {"expired certificate", Mtls(expired)}};
  for (const Caller& caller : refused) {
    grpc::Status s = Submit(caller.creds, OpenAccount("mallory"));
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE)
        << caller.what << ": " << s.error_message();
  }
  EXPECT_EQ(Effects(), 0);

  // The same command with a valid certificate goes through: the refusals above were the
  // certificates' doing.
  grpc::Status s = Submit(Mtls(acme_), OpenAccount("mallory"));
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(Effects(), 1);
}

TEST_F(TlsTest, TheTenantComesFromTheCertificate) {
  // A globex certificate claiming acme, in the command or in the header.
  grpc::Status in_command = Submit(Mtls(globex_), OpenAccount("bob", "acme"));
  EXPECT_EQ(in_command.error_code(), grpc::StatusCode::PERMISSION_DENIED)
      << in_command.error_message();
  grpc::Status in_header = Submit(Mtls(globex_), OpenAccount("bob"), "acme");
  EXPECT_EQ(in_header.error_code(), grpc::StatusCode::PERMISSION_DENIED)
      << in_header.error_message();
  EXPECT_NE(in_header.error_message().find("globex"), std::string::npos)
      << in_header.error_message();
  // A certificate that names no tenant, or two, acts for nobody.
  grpc::Status no_tenant = Submit(Mtls(sidecar_tls_), OpenAccount("bob"));
  EXPECT_EQ(no_tenant.error_code(), grpc::StatusCode::PERMISSION_DENIED)
      << no_tenant.error_message();
  TlsFiles two = Issue(*pki_, "two-tenants",
                       TenantId("acme", "agent") + ",URI:" + TenantId("globex", "agent"));
  grpc::Status ambiguous = Submit(Mtls(two), OpenAccount("bob"));
  EXPECT_EQ(ambiguous.error_code(), grpc::StatusCode::PERMISSION_DENIED)
      << ambiguous.error_message();
  EXPECT_EQ(Effects(), 0);

  // The agent serves acme only.
  StartAgent();
  TlsFiles globex_producer = Issue(*pki_, "globex-producer", TenantId("globex", "producer"));
  auto agent = v1::Agent::NewStub(FreshChannel(agent_->address(), Mtls(globex_producer)));
  v1::EnqueueRequest enqueue;
  *enqueue.mutable_command() = OpenAccount("bob");
  v1::EnqueueResponse enqueued;
  auto context = Context();
  grpc::Status s = agent->Enqueue(context.get(), enqueue, &enqueued);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  // A batch is settled against the caller's tenant as a whole, before any command of it.
  v1::EnqueueBatchRequest batch;
  *batch.add_commands() = OpenAccount("bob");
  *batch.add_commands() = OpenAccount("carol");
  v1::EnqueueBatchResponse batched;
  auto batch_context = Context();
  grpc::Status batch_status = agent->EnqueueBatch(batch_context.get(), batch, &batched);
  EXPECT_EQ(batch_status.error_code(), grpc::StatusCode::PERMISSION_DENIED)
      << batch_status.error_message();
  EXPECT_EQ(batched.items_size(), 0);
  auto acme_view = v1::Agent::NewStub(FreshChannel(agent_->address(), Mtls(acme_)));
  v1::ListRequest list;
  list.set_limit(10);
  v1::ListResponse listed;
  auto c = Context();
  ASSERT_TRUE(acme_view->List(c.get(), list, &listed).ok());
  EXPECT_EQ(listed.records_size(), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(Effects(), 0);

  // An honest claim is fine.
  grpc::Status honest = Submit(Mtls(acme_), OpenAccount("bob", "acme"), "acme");
  EXPECT_TRUE(honest.ok()) << honest.error_message();
  EXPECT_EQ(Effects(), 1);
}

// The credential epoch that a revocation compares comes from the certificate
// (urn:eonce:credential-epoch:<n>), not from the command or a header the caller writes.
TEST_F(TlsTest, TheCredentialEpochComesFromTheCertificate) {
  std::string policy = dir_ + "/epoch-policy";
  std::ofstream(policy) << "act acme agent teller\nallow acme * *\nrevoke acme teller below_epoch=3\n";
  TlsFiles sidecar_files = sidecar_tls_;
  sidecar_files.ca_file = sidecar_ca_;
  std::vector<std::string> args = {
      "--listen=127.0.0.1:0", "--data_dir=" + dir_ + "/sidecar-epoch",
      "--upstream=" + ledger_->address(), "--lease_ms=2000", "--forward_timeout_ms=1000",
      "--outcome_query_timeout_ms=500", "--policy_file=" + policy};
  for (auto& a : TlsArgs(sidecar_files)) args.push_back(a);
  auto sidecar = Process::Start("dedupe_sidecar/dedupe_sidecar", args, dir_ + "/sidecar-epoch.log");
  ASSERT_TRUE(sidecar.ok()) << sidecar.status();
  auto submit = [&](const TlsFiles& who, const std::string& account) {
    auto stub = v1::Sidecar::NewStub(FreshChannel((*sidecar)->address(), Mtls(who)));
    auto context = Context();
    context->AddMetadata(kCredentialEpochHeader, "9");  // claims, ignored under mTLS
    v1::SubmitRequest request;
    *request.mutable_command() = OpenAccount(account);
    request.mutable_command()->set_credential_epoch(9);  // the spoof
    FillPayloadHash(request.mutable_command());
    v1::SubmitResponse response;
    grpc::Status s = stub->Submit(context.get(), request, &response);
    return FromGrpcStatus(s, context.get());
  };
  TlsFiles old_epoch = Issue(*pki_, "acme-epoch2",
                             TenantId("acme", "agent") + ",URI:urn:eonce:credential-epoch:2");
  TlsFiles no_epoch = acme_;
  TlsFiles new_epoch = Issue(*pki_, "acme-epoch3",
                             TenantId("acme", "agent") + ",URI:urn:eonce:credential-epoch:3");
  absl::Status spoofed = submit(old_epoch, "eve");
  EXPECT_EQ(spoofed.code(), absl::StatusCode::kPermissionDenied) << spoofed;
  EXPECT_EQ(ReasonOf(spoofed), "CREDENTIAL_REVOKED");
  EXPECT_EQ(ReasonOf(submit(no_epoch, "eve")), "CREDENTIAL_REVOKED");
  absl::Status renewed = submit(new_epoch, "eve");
  EXPECT_TRUE(renewed.ok()) << renewed;  // the negative control: the right credential works
  EXPECT_EQ(Effects(), 1);
}

TEST_F(TlsTest, ReconcileAndAuditStayInsideTheTenant) {
  ASSERT_TRUE(Submit(Mtls(acme_), OpenAccount("carol")).ok());
  auto reconcile = [&](const TlsFiles& who) {
    auto stub = v1::Sidecar::NewStub(FreshChannel(sidecar_->address(), Mtls(who)));
    v1::ReconcileRequest request;
    request.set_command_id("open-carol");
    v1::ReconcileResponse response;
    auto context = Context();
    grpc::Status s = stub->Reconcile(context.get(), request, &response);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return response.state();
  };
  // The audit log is an operator's: the certificate must name one.
  TlsFiles acme_operator =
      Issue(*pki_, "acme-oncall", "spiffe://eonce.test/tenant/acme/operator/oncall");
  TlsFiles globex_operator =
      Issue(*pki_, "globex-oncall", "spiffe://eonce.test/tenant/globex/operator/oncall");
  auto audit_call = [&](const TlsFiles& who, v1::QueryAuditResponse* response) {
    auto stub = v1::SidecarAdmin::NewStub(FreshChannel(sidecar_->address(), Mtls(who)));
    v1::QueryAuditRequest request;
    request.set_command_id("open-carol");
    auto context = Context();
    context->AddMetadata(kOperatorHeader, "oncall");  // ignored: the certificate decides
    grpc::Status s = stub->QueryAudit(context.get(), request, response);
    return FromGrpcStatus(s, context.get());
  };
  // "<tenant> <decision>" of each event the operator is shown.
  auto audit = [&](const TlsFiles& who) {
    v1::QueryAuditResponse response;
    absl::Status s = audit_call(who, &response);
    EXPECT_TRUE(s.ok()) << s;
    std::vector<std::string> events;
    for (const auto& e : response.events()) events.push_back(e.tenant() + " " + e.decision());
    return events;
  };
  {
    v1::QueryAuditResponse response;
    absl::Status refused = audit_call(acme_, &response);
    EXPECT_EQ(refused.code(), absl::StatusCode::kPermissionDenied) << refused;
    EXPECT_EQ(ReasonOf(refused), "OPERATOR_REQUIRED");
  }
  EXPECT_EQ(reconcile(acme_), v1::RECORD_COMMITTED);
  EXPECT_EQ(reconcile(globex_), v1::RECORD_NOT_SEEN);
  // The audit log is written in the background; a query flushes it first.
  EXPECT_EQ(audit(acme_operator),
            (std::vector<std::string>{"acme committed", "acme reconciled"}));
  // Globex's operator sees its own tenant's lookup of that command id, none of acme's.
  EXPECT_EQ(audit(globex_operator), std::vector<std::string>{"globex reconciled"});
}

// A certificate revoked by its CA is refused once the CA's revocation list is in the
// directory named by --tls_crl_dir; the others still get in.
TEST_F(TlsTest, ARevokedCertificateIsRefused) {
  TlsFiles stolen = Issue(*pki_, "acme-stolen", TenantId("acme", "laptop"));
  std::string crl_dir = dir_ + "/crl";
  ASSERT_EQ(mkdir(crl_dir.c_str(), 0755), 0);
  absl::Status revoked = pki_->Revoke(stolen, crl_dir);
  ASSERT_TRUE(revoked.ok()) << revoked;

  TlsFiles files = sidecar_tls_;
  files.crl_dir = crl_dir;
  SidecarServerOptions options;
  options.data_dir = dir_ + "/with-crl";
  options.upstream_address = ledger_->address();
  options.policy_file = dir_ + "/policy";
  options.tls = files;
  auto server = SidecarServer::Start(options, RealClock::Get());
  ASSERT_TRUE(server.ok()) << server.status();
  std::string address = "127.0.0.1:" + std::to_string((*server)->port());
  auto info = [&](const TlsFiles& who) {
    auto stub = v1::Sidecar::NewStub(FreshChannel(address, Mtls(who)));
    auto context = Context(3000);
    v1::GetInfoResponse response;
    return stub->GetInfo(context.get(), v1::GetInfoRequest(), &response);
  };
  grpc::Status refused = info(stolen);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE) << refused.error_message();
  grpc::Status admitted = info(acme_);
  EXPECT_TRUE(admitted.ok()) << admitted.error_message();
  // Without the list the same certificate is fine: the refusal was the revocation's doing.
  v1::GetInfoResponse sidecar_info;
  EXPECT_TRUE(GetInfo(Mtls(stolen), &sidecar_info).ok());
  EXPECT_FALSE(sidecar_info.identity_from_headers());  // mutual TLS: identities are proven
  EXPECT_TRUE((*server)->Shutdown(1000).ok());
}

TEST_F(TlsTest, ChangedFilesAreUsedForNewConnectionsWithoutARestart) {
  auto second = TestPki::Create(dir_, "second");
  ASSERT_TRUE(second.ok()) << second.status();
  TlsFiles newcomer = Issue(*second, "acme-newcomer", TenantId("acme", "newcomer"));
  newcomer.ca_file = pki_->ca_file();
  grpc::Status before = GetInfo(Mtls(newcomer));
  EXPECT_EQ(before.error_code(), grpc::StatusCode::UNAVAILABLE) << before.error_message();

  // Rotate the sidecar's trust bundle to include the second CA, as a mounted Secret
  // changes: written aside, then renamed over the file.
  {
    std::ofstream bundle(sidecar_ca_ + ".new");
    bundle << ReadFile(pki_->ca_file()) << ReadFile(second->ca_file());
  }
  ASSERT_EQ(std::rename((sidecar_ca_ + ".new").c_str(), sidecar_ca_.c_str()), 0);
  grpc::Status after = before;
  for (int i = 0; i < 100 && !after.ok(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    after = GetInfo(Mtls(newcomer));
  }
  EXPECT_TRUE(after.ok()) << after.error_message();
  EXPECT_TRUE(sidecar_->Running());

  // And the other way: a bundle without the first CA locks its holders out.
  {
    std::ofstream bundle(sidecar_ca_ + ".new");
    bundle << ReadFile(second->ca_file());
  }
  ASSERT_EQ(std::rename((sidecar_ca_ + ".new").c_str(), sidecar_ca_.c_str()), 0);
  grpc::Status locked = grpc::Status::OK;
  for (int i = 0; i < 100 && locked.ok(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    locked = GetInfo(Mtls(acme_));
  }
  EXPECT_EQ(locked.error_code(), grpc::StatusCode::UNAVAILABLE);
}

// The kubelet's gRPC probes cannot present a client certificate: a plaintext port serves
// the health service, and only it.
TEST_F(TlsTest, AHealthOnlyPortAnswersProbesWithoutACertificate) {
  SidecarServerOptions options;
  options.data_dir = dir_ + "/in-process";
  options.upstream_address = ledger_->address();
  options.policy_file = dir_ + "/policy";
  options.tls = sidecar_tls_;
  options.health_address = "127.0.0.1:0";
  auto server = SidecarServer::Start(options, RealClock::Get());
  ASSERT_TRUE(server.ok()) << server.status();
  std::string main_port = "127.0.0.1:" + std::to_string((*server)->port());
  std::string health_port = "127.0.0.1:" + std::to_string((*server)->health_port());
  EXPECT_EQ(testing::HealthStatus(FreshChannel(main_port, grpc::InsecureChannelCredentials())), -1);
  EXPECT_EQ(testing::HealthStatus(FreshChannel(main_port, Mtls(acme_))), 1);
  EXPECT_EQ(testing::HealthStatus(FreshChannel(health_port, grpc::InsecureChannelCredentials())),
            1);
  auto plaintext =
      v1::Sidecar::NewStub(FreshChannel(health_port, grpc::InsecureChannelCredentials()));
  auto context = Context();
  context->AddMetadata(kTenantHeader, "acme");
  v1::SubmitRequest request;
  *request.mutable_command() = OpenAccount("eve");
  v1::SubmitResponse response;
  EXPECT_EQ(plaintext->Submit(context.get(), request, &response).error_code(),
            grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_TRUE((*server)->Shutdown(1000).ok());
  EXPECT_EQ(Effects(), 0);
}

TEST(TlsFilesTest, ReadsTheTenantFromASpiffeId) {
  EXPECT_EQ(TenantFromSpiffeId("spiffe://eonce.test/tenant/acme/agent"), "acme");
  EXPECT_EQ(TenantFromSpiffeId("spiffe://prod.example/tenant/globex"), "globex");
  EXPECT_EQ(TenantFromSpiffeId("spiffe://eonce.test/service/ledger"), "");
  EXPECT_EQ(TenantFromSpiffeId("spiffe:///tenant/acme"), "");
  EXPECT_EQ(TenantFromSpiffeId("https://eonce.test/tenant/acme"), "");
}

TEST(TlsFilesTest, AllThreeFilesOrNone) {
  TlsFiles none;
  EXPECT_TRUE(ValidateTlsFiles(none).ok());
  TlsFiles partial;
  partial.cert_file = "/nonexistent/cert.pem";
  absl::Status s = ValidateTlsFiles(partial);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("tls_key"), std::string::npos) << s;
  TlsFiles crl_only;
  crl_only.crl_dir = "/tmp";
  EXPECT_EQ(ValidateTlsFiles(crl_only).code(), absl::StatusCode::kInvalidArgument);
  TlsFiles missing{"/nonexistent/cert.pem", "/nonexistent/key.pem", "/nonexistent/ca.pem", 1};
  s = ValidateTlsFiles(missing);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("tls_cert"), std::string::npos) << s;
}

}  // namespace
}  // namespace eonce
