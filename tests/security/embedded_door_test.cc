// A ledger with its sidecar in process (ledger_service --sidecar_listen) has one door for
// tenants: the sidecar. Its business port, which serves the Ledger, Effects, FollowUps,
// SlotData, Forwards and Outcome services, is a unix socket of its own user's or a port
// with mutual TLS, and there it admits eonce components and operators only.
//
// Four attacks a tenant could make on that port when it trusted the eonce-tenant header
// (a plaintext loopback port, or a TLS port that took any certificate the CA signed):
//   transfer as another tenant, list every tenant's effects, pre-claim another tenant's
//   idempotency key (whose real command then gets KEY_REUSED), and acknowledge another
//   tenant's follow-ups (deleting credits in flight).
// Each test makes all four from a tenant's place and checks they are refused and did
// nothing, against the real binary; the victim's own commands, through the sidecar, are the
// negative control (they go through).
#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/command/command.h"
#include "common/rpc/grpc_status.h"
#include "common/coord/slots.h"
#include "common/base/status.h"
#include "common/rpc/tls.h"
#include "eonce/ledger/v1/ledger.grpc.pb.h"
#include "eonce/v1/outcome.grpc.pb.h"
#include "eonce/v1/sidecar.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "tests/util/process.h"
#include "tests/util/temp_dir.h"
#include "tests/util/test_pki.h"

namespace eonce {
namespace {

using testing::TestPki;

constexpr char kLedger[] = "services/ledger/ledger_service";
constexpr char kTransfer[] = "/eonce.ledger.v1.Ledger/Transfer";
constexpr char kOpenAccount[] = "/eonce.ledger.v1.Ledger/OpenAccount";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::shared_ptr<grpc::Channel> Dial(const std::string& address,
                                    std::shared_ptr<grpc::ChannelCredentials> credentials) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(address, std::move(credentials), args);
}

std::unique_ptr<grpc::ClientContext> Context(const std::map<std::string, std::string>& headers) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  for (const auto& [name, value] : headers) context->AddMetadata(name, value);
  return context;
}

// "OK", or the code and eonce reason of a refusal.
std::string Outcome(const grpc::Status& status, const grpc::ClientContext& context) {
  if (status.ok()) return "OK";
  absl::Status s = FromGrpcStatus(status, &context);
  return absl::StrCat(absl::StatusCodeToString(s.code()), " ", ReasonOf(s));
}

// Two account ids of tenant acme in different slots: a transfer between them is a debit
// here and a credit sent through the ledger's outbox (--cross_slot_credits).
std::pair<std::string, std::string> AccountsInTwoSlots() {
  const std::string a = "a";
  for (int i = 0;; ++i) {
    std::string b = absl::StrCat("b", i);
    if (SlotOf("acme", "account", a) != SlotOf("acme", "account", b)) return {a, b};
  }
}

v1::Command LedgerCommand(const std::string& id, const std::string& method,
                          const std::string& request, const std::string& account) {
  v1::Command c;
  c.set_command_id(id);
  c.set_target_method(method);
  c.set_request(request);
  c.set_actor("alice");
  c.mutable_entity()->set_type("account");
  c.mutable_entity()->set_id(account);
  c.set_idempotency_key(DeriveIdempotencyKey(c));
  FillPayloadHash(&c);
  return c;
}

v1::Command Open(const std::string& account) {
  ledger::v1::OpenAccountRequest open;
  open.set_id(account);
  open.set_initial_balance(1000);
  return LedgerCommand("open-" + account, kOpenAccount, open.SerializeAsString(), account);
}

v1::Command Transfer(const std::string& id, const std::string& from, const std::string& to,
                     int64_t amount) {
  ledger::v1::TransferRequest t;
  t.set_from(from);
  t.set_to(to);
  t.set_amount(amount);
  return LedgerCommand(id, kTransfer, t.SerializeAsString(), from);
}

class EmbeddedDoorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Short: the business socket's path must fit a sockaddr_un. (Outside TEST_TMPDIR, so
    // the test removes it.)
    dir_ = testing::SocketDir();
    std::tie(from_, to_) = AccountsInTwoSlots();
  }

  void TearDown() override {
    if (ledger_ != nullptr) ledger_->Signal(SIGTERM, true);
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  std::vector<std::string> EmbeddedArgs() const {
    return {"--data_dir=" + dir_ + "/ledger", "--sidecar_listen=127.0.0.1:0",
            "--sidecar_data_dir=" + dir_ + "/sidecar", "--cross_slot_credits"};
  }

  // The business port the ledger names in its log, before it announces its sidecar's.
  std::string BusinessAddress() const {
    const std::regex line("\"business port\".*\"listen\":\"([^\"]*)\"");
    std::smatch found;
    const std::string log = ReadFile(dir_ + "/ledger.log");
    if (!std::regex_search(log, found, line)) return "";
    return found[1];
  }

  // The victim: tenant acme's producer, through the sidecar.
  std::string Submit(const v1::Command& command) {
    auto stub = v1::Sidecar::NewStub(victim_);
    auto context = Context(victim_headers_);
    v1::SubmitRequest request;
    *request.mutable_command() = command;
    v1::SubmitResponse response;
    return Outcome(stub->Submit(context.get(), request, &response), *context);
  }

  // What a caller on the business port does to tenant acme, stating `headers`.
  std::map<std::string, std::string> Attack(const std::shared_ptr<grpc::Channel>& port,
                                            std::map<std::string, std::string> headers) {
    std::map<std::string, std::string> out;
    auto ledger = ledger::v1::Ledger::NewStub(port);
    auto effects = v1::Effects::NewStub(port);
    auto follow_ups = v1::FollowUps::NewStub(port);
    headers[kTenantHeader] = "acme";
    {
      // Acme's money, moved by someone else.
      auto h = headers;
      h[kCommandIdHeader] = "stolen-1";
      auto context = Context(h);
      ledger::v1::TransferRequest transfer;
      transfer.set_from(from_);
      transfer.set_to(to_);
      transfer.set_amount(300);
      ledger::v1::TransferResponse response;
      out["Transfer"] = Outcome(ledger->Transfer(context.get(), transfer, &response), *context);
    }
    {
      // Every tenant's effects: no tenant stated at all.
      auto h = headers;
      h.erase(kTenantHeader);
      auto context = Context(h);
      v1::ListEffectsRequest request;
      request.set_limit(1000);
      v1::ListEffectsResponse response;
      out["ListEffects"] = Outcome(effects->ListEffects(context.get(), request, &response), *context);
      if (response.effects_size() > 0) out["ListEffects"] += " (effects shown)";
    }
    {
      // The key of acme's next command, taken first by another command id.
      auto h = headers;
      h[kCommandIdHeader] = "claim-1";
      h[kIdempotencyKeyHeader] = Transfer("victim-2", from_, to_, 5).idempotency_key();
      auto context = Context(h);
      ledger::v1::OpenAccountRequest open;
      open.set_id("junk");
      open.set_initial_balance(1);
      ledger::v1::Account response;
      out["PreClaim"] = Outcome(ledger->OpenAccount(context.get(), open, &response), *context);
    }
    {
      // Acme's credits in flight, read and acknowledged before its relay took them.
      auto pull_context = Context(headers);
      v1::PullFollowUpsRequest pull;
      pull.set_limit(100);
      v1::PullFollowUpsResponse pulled;
      out["PullFollowUps"] =
          Outcome(follow_ups->PullFollowUps(pull_context.get(), pull, &pulled), *pull_context);
      v1::AckFollowUpsRequest ack;
      for (const auto& f : pulled.follow_ups()) ack.add_ids(f.id());
      if (ack.ids_size() == 0) ack.add_ids("unknown");  // refused before it is looked at
      auto ack_context = Context(headers);
      v1::AckFollowUpsResponse acked;
      out["AckFollowUps"] =
          Outcome(follow_ups->AckFollowUps(ack_context.get(), ack, &acked), *ack_context);
    }
    return out;
  }

  // The victim's state, read by an eonce component on the business port (`checker`): a's
  // balance and the credits pending in acme's outbox.
  void ExpectNothingDone(const std::shared_ptr<grpc::Channel>& checker,
                         const std::map<std::string, std::string>& component) {
    auto h = component;
    h[kTenantHeader] = "acme";
    auto ledger = ledger::v1::Ledger::NewStub(checker);
    auto context = Context(h);
    ledger::v1::GetAccountRequest get;
    get.set_id(from_);
    ledger::v1::Account account;
    grpc::Status read = ledger->GetAccount(context.get(), get, &account);
    ASSERT_TRUE(read.ok()) << read.error_message();
    EXPECT_EQ(account.balance(), 1000 - 10) << "someone else moved acme's money";
    // The key the attacker tried to take is still acme's.
    EXPECT_EQ(Submit(Transfer("victim-2", from_, to_, 5)), "OK");

    auto follow_ups = v1::FollowUps::NewStub(checker);
    auto pull_context = Context(h);
    v1::PullFollowUpsRequest pull;
    pull.set_limit(100);
    v1::PullFollowUpsResponse pulled;
    grpc::Status listed = follow_ups->PullFollowUps(pull_context.get(), pull, &pulled);
    ASSERT_TRUE(listed.ok()) << listed.error_message();
    // Acme's credit of victim-1 (victim-2's is there too once it went through).
    ASSERT_GE(pulled.follow_ups_size(), 1) << "acme's credit in flight was acknowledged";
    EXPECT_EQ(pulled.follow_ups(0).command().command_id(), credit_id_);
  }

  // Acme opens two accounts and sends 10 from one to the other (a credit in flight).
  void VictimWorks() {
    ASSERT_EQ(Submit(Open(from_)), "OK");
    ASSERT_EQ(Submit(Open(to_)), "OK");
    auto stub = v1::Sidecar::NewStub(victim_);
    auto context = Context(victim_headers_);
    v1::SubmitRequest request;
    *request.mutable_command() = Transfer("victim-1", from_, to_, 10);
    v1::SubmitResponse response;
    grpc::Status sent = stub->Submit(context.get(), request, &response);
    ASSERT_TRUE(sent.ok()) << sent.error_message();
    ledger::v1::TransferResponse transfer;
    ASSERT_TRUE(transfer.ParseFromString(response.result().response()));
    credit_id_ = transfer.credit_command_id();
    ASSERT_FALSE(credit_id_.empty());
  }

  std::string dir_;
  std::string from_, to_;
  std::string credit_id_;
  std::shared_ptr<grpc::Channel> victim_;
  std::map<std::string, std::string> victim_headers_;
  std::unique_ptr<Process> ledger_;
};

// Mutual TLS on the business port: a certificate the CA signed is not enough; a tenant's
// workload is refused whatever tenant it states, and a component is let in.
TEST_F(EmbeddedDoorTest, OverMutualTlsATenantsCertificateIsRefusedOnTheBusinessPort) {
  auto pki = TestPki::Create(dir_, "root");
  ASSERT_TRUE(pki.ok()) << pki.status();
  auto server = pki->Issue("ledger", "");
  auto acme = pki->Issue("acme", "spiffe://eonce.test/tenant/acme/workload/payroll");
  auto beta = pki->Issue("beta", "spiffe://eonce.test/tenant/beta/workload/shop");
  auto checker = pki->Issue("checker", "spiffe://eonce.test/eonce/checker");
  ASSERT_TRUE(server.ok() && acme.ok() && beta.ok() && checker.ok());
  std::vector<std::string> args = EmbeddedArgs();
  args.push_back("--listen=127.0.0.1:0");
  // Under mutual TLS a sidecar takes no call without a policy.
  const std::string policy = dir_ + "/policy";
  std::ofstream(policy) << "act acme * *\nact beta * *\nallow acme * *\nallow beta * *\n";
  args.push_back("--sidecar_policy_file=" + policy);
  for (const std::string& flag : {"--tls_cert=" + server->cert_file, "--tls_key=" + server->key_file,
                                  "--tls_ca=" + server->ca_file}) {
    args.push_back(flag);
  }
  auto ledger = Process::Start(kLedger, args, dir_ + "/ledger.log");
  ASSERT_TRUE(ledger.ok()) << ledger.status();
  ledger_ = std::move(*ledger);
  const std::string business = BusinessAddress();
  ASSERT_FALSE(business.empty()) << ReadFile(dir_ + "/ledger.log");
  victim_ = Dial(ledger_->address(), ChannelCredentials(*acme));
  VictimWorks();

  // Beta's workload, stating acme: its certificate names it, and it is no component.
  auto outcomes = Attack(Dial(business, ChannelCredentials(*beta)), {});
  // Even stating it is the sidecar: a certificate's word is the only one over TLS.
  auto claiming = Attack(Dial(business, ChannelCredentials(*beta)), {{kComponentHeader, "sidecar"}});
  for (const auto* run : {&outcomes, &claiming}) {
    for (const char* attack : {"Transfer", "ListEffects", "PreClaim", "PullFollowUps", "AckFollowUps"}) {
      EXPECT_EQ(run->at(attack), "PERMISSION_DENIED BUSINESS_CALLER_NOT_ALLOWED") << attack;
    }
  }
  ExpectNothingDone(Dial(business, ChannelCredentials(*checker)), {});
}

// The default business port of an embedded ledger: a unix socket in its data directory,
// its own user's, where a caller states who it is; a tenant's statement is not enough.
TEST_F(EmbeddedDoorTest, ByDefaultTheBusinessPortIsAnOwnerOnlySocketForComponents) {
  auto ledger = Process::Start(kLedger, EmbeddedArgs(), dir_ + "/ledger.log");
  ASSERT_TRUE(ledger.ok()) << ledger.status();
  ledger_ = std::move(*ledger);
  const std::string socket = dir_ + "/ledger/business.sock";
  EXPECT_EQ(BusinessAddress(), "unix:" + socket);
  struct stat info;
  ASSERT_EQ(stat(socket.c_str(), &info), 0) << "no business socket at " << socket;
  EXPECT_TRUE(S_ISSOCK(info.st_mode));
  EXPECT_EQ(info.st_mode & 0777, 0600u);

  victim_ = Dial(ledger_->address(), grpc::InsecureChannelCredentials());
  victim_headers_ = {{kTenantHeader, "acme"}, {kWorkloadHeader, "payroll"}};
  VictimWorks();

  auto port = Dial("unix:" + socket, grpc::InsecureChannelCredentials());
  auto unstated = Attack(port, {});
  auto workload = Attack(port, {{kWorkloadHeader, "shop"}});
  for (const char* attack : {"Transfer", "ListEffects", "PreClaim", "PullFollowUps", "AckFollowUps"}) {
    EXPECT_EQ(unstated.at(attack), "UNAUTHENTICATED NO_IDENTITY") << attack;
    EXPECT_EQ(workload.at(attack), "PERMISSION_DENIED BUSINESS_CALLER_NOT_ALLOWED") << attack;
  }
  // The relay of the ledger's outbox is a component of the pod.
  ExpectNothingDone(port, {{kComponentHeader, "relay"}});
}

// Plaintext TCP as the business port of an embedded ledger is refused at start, loopback
// and --insecure included: any local process could state that it is the sidecar.
TEST_F(EmbeddedDoorTest, APlaintextTcpBusinessPortIsRefusedAtStart) {
  for (bool insecure : {false, true}) {
    std::vector<std::string> args = EmbeddedArgs();
    args.push_back("--listen=127.0.0.1:0");
    if (insecure) args.push_back("--insecure");
    const std::string log = dir_ + (insecure ? "/insecure.log" : "/plaintext.log");
    auto exit_code = Process::RunToExit(kLedger, args, log, 10'000);
    ASSERT_TRUE(exit_code.ok()) << exit_code.status() << ": it served the port";
    EXPECT_EQ(*exit_code, 2);
    const std::string message = ReadFile(log);
    EXPECT_TRUE(absl::StrContains(message, "--listen=127.0.0.1:0")) << message;
    EXPECT_TRUE(absl::StrContains(message, "unix:/path")) << message;
    EXPECT_TRUE(absl::StrContains(message, "--tls_cert")) << message;
  }
}

}  // namespace
}  // namespace eonce
