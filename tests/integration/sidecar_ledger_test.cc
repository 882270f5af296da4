// The real sidecar in front of the real ledger, over real gRPC on loopback ports, with
// real RocksDB data directories: through Submit and through transparent mode, with the
// ledger in its idempotent and its legacy mode.
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/base/clock.h"
#include "common/command/command.h"
#include "common/base/status.h"
#include "common/rpc/grpc_status.h"
#include "dedupe_sidecar/doors/sidecar_service.h"
#include "eonce/ledger/v1/ledger.grpc.pb.h"
#include "eonce/v1/outcome.grpc.pb.h"
#include "eonce/v1/sidecar.grpc.pb.h"
#include "absl/synchronization/notification.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "services/ledger/ledger_service.h"
#include "tests/integration/ledger_calls.h"
#include "tests/util/temp_dir.h"
#include "tests/util/lose_one_answer.h"

namespace eonce {
namespace {

class SidecarLedgerTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    legacy_ = GetParam();
    LedgerServerOptions ledger_options;
    ledger_options.data_dir = testing::FreshDir("ledger");
    ledger_options.legacy_mode = legacy_;
    ledger_options.faults = &faults_;
    auto ledger = LedgerServer::Start(ledger_options, RealClock::Get());
    ASSERT_TRUE(ledger.ok()) << ledger.status();
    ledger_ = std::move(*ledger);

    std::string policy_path = testing::FreshDir("policy") + "/policy";
    FILE* f = fopen(policy_path.c_str(), "w");
    fputs(
        "act acme * *\n"
        "act beta * *\n"
        "allow acme * *\n"
        "allow beta * /eonce.ledger.v1.Ledger/OpenAccount\n"
        "revoke acme mallory\n"
        "operator acme oncall\n"
        "operator beta oncall\n"
        "readonly /eonce.ledger.v1.Ledger/GetAccount\n",
        f);
    fclose(f);
    SidecarServerOptions options =
        testing::SidecarOptionsFor(ledger_->port(), testing::FreshDir("sidecar"));
    options.policy_file = policy_path;
    auto sidecar = SidecarServer::Start(options, RealClock::Get());
    ASSERT_TRUE(sidecar.ok()) << sidecar.status();
    sidecar_ = std::move(*sidecar);

    auto to_sidecar = grpc::CreateChannel("127.0.0.1:" + std::to_string(sidecar_->port()),
                                          grpc::InsecureChannelCredentials());
    sidecar_stub_ = v1::Sidecar::NewStub(to_sidecar);
    transparent_ = ledger::v1::Ledger::NewStub(to_sidecar);
    auto to_ledger = grpc::CreateChannel("127.0.0.1:" + std::to_string(ledger_->port()),
                                         grpc::InsecureChannelCredentials());
    direct_ = ledger::v1::Ledger::NewStub(to_ledger);
    effects_ = v1::Effects::NewStub(to_ledger);

    for (const char* id : {"a", "b"}) {
      ledger::v1::OpenAccountRequest open;
      open.set_id(id);
      open.set_initial_balance(1000);
      auto r = Submit(MakeCommand(std::string("open-") + id,
                                  "/eonce.ledger.v1.Ledger/OpenAccount",
                                  open.SerializeAsString()));
      ASSERT_TRUE(r.ok()) << r.status();
    }
  }

  static v1::Command MakeCommand(const std::string& id, const std::string& method,
                                 const std::string& request) {
    return testing::LedgerCommand(id, method, request);
  }
  static v1::Command TransferCommand(const std::string& id, int64_t amount) {
    return testing::TransferCommand(id, amount);
  }
  absl::StatusOr<v1::SubmitResponse> Submit(const v1::Command& c,
                                            const std::string& tenant = "acme") {
    return testing::SubmitTo(*sidecar_stub_, c, tenant);
  }
  // Submit, once more after each read of the business's catalog that its answer says is
  // under way (CATALOG_PENDING: the catalog was older than a second and is read again),
  // as the agent's retry would.
  absl::StatusOr<v1::SubmitResponse> SubmitOnceCatalogRead(const v1::Command& c) {
    absl::StatusOr<v1::SubmitResponse> answer = Submit(c);
    for (int i = 0; i < 3 && ReasonOf(answer.status()) == "CATALOG_PENDING"; ++i) {
      EXPECT_TRUE(sidecar_->AwaitCatalog(absl::Seconds(10)));
      answer = Submit(c);
    }
    return answer;
  }
  static ledger::v1::TransferRequest AToB(int64_t amount) { return testing::AToB(amount); }

  // Twice an unkeyed Transfer through a sidecar: refused each time, nothing moves.
  void ExpectUnkeyedTransfersRefused(ledger::v1::Ledger::Stub& stub) {
    for (int i = 0; i < 2; ++i) {
      grpc::ClientContext context;
      context.AddMetadata(kTenantHeader, "acme");
      ledger::v1::TransferResponse none;
      EXPECT_EQ(stub.Transfer(&context, AToB(10), &none).error_code(),
                grpc::StatusCode::FAILED_PRECONDITION);
    }
    EXPECT_EQ(Balance("a"), 1000);
  }

  int EffectsOf(const std::string& command_id) {
    return testing::EffectsOf(*effects_, command_id);
  }
  int64_t Balance(const std::string& id) { return testing::BalanceOf(*direct_, id); }

  void ExpectConserved() {
    grpc::ClientContext context;
    context.AddMetadata(kComponentHeader, "checker");
    ledger::v1::GetTotalResponse total;
    ASSERT_TRUE(direct_->GetTotal(&context, ledger::v1::GetTotalRequest(), &total).ok());
    EXPECT_EQ(total.total_balance(), total.total_minted());
    EXPECT_EQ(total.total_minted(), 2000);
  }

  bool legacy_ = false;
  LoseOneAnswer faults_;
  std::unique_ptr<LedgerServer> ledger_;
  std::unique_ptr<SidecarServer> sidecar_;
  std::unique_ptr<v1::Sidecar::Stub> sidecar_stub_;
  std::unique_ptr<ledger::v1::Ledger::Stub> transparent_;
  std::unique_ptr<ledger::v1::Ledger::Stub> direct_;
  std::unique_ptr<v1::Effects::Stub> effects_;
};

TEST_P(SidecarLedgerTest, SubmitAppliesOnceAndReplaysDuplicatesByteForByte) {
  v1::Command c = TransferCommand("t1", 100);
  auto first = Submit(c);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->disposition(), v1::APPLIED);
  ledger::v1::TransferResponse applied;
  ASSERT_TRUE(applied.ParseFromString(first->result().response()));
  EXPECT_EQ(applied.from_balance(), 900);
  for (int i = 0; i < 5; ++i) {
    auto again = Submit(c);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->disposition(), v1::REPLAYED);
    EXPECT_EQ(again->result().response(), first->result().response());
  }
  EXPECT_EQ(EffectsOf("t1"), 1);  // in both modes: the sidecar stops the duplicates
  EXPECT_EQ(Balance("a"), 900);
  ExpectConserved();
}

TEST_P(SidecarLedgerTest, RejectionIsStoredAndReplayedWithItsReason) {
  auto poor = Submit(TransferCommand("big", 5000));
  ASSERT_TRUE(poor.ok());
  EXPECT_EQ(poor->result().code(), static_cast<int>(grpc::StatusCode::FAILED_PRECONDITION));
  std::optional<v1::Rejection> rejection = RejectionOf(poor->result().error_details());
  ASSERT_TRUE(rejection.has_value());
  EXPECT_EQ(rejection->reason(), "INSUFFICIENT_FUNDS");
  auto again = Submit(TransferCommand("big", 5000));
  EXPECT_EQ(again->disposition(), v1::REPLAYED);
  EXPECT_EQ(again->result().SerializeAsString(), poor->result().SerializeAsString());
}

TEST_P(SidecarLedgerTest, ConflictAndTenantScope) {
  ASSERT_TRUE(Submit(TransferCommand("t1", 100)).ok());
  v1::Command reused = TransferCommand("t1", 999);
  EXPECT_EQ(ReasonOf(Submit(reused).status()), "IDEMPOTENCY_CONFLICT");
  EXPECT_EQ(Balance("a"), 900);
  // Another tenant is denied by the policy, whatever the key.
  EXPECT_EQ(Submit(TransferCommand("t2", 1), "globex").status().code(),
            absl::StatusCode::kPermissionDenied);
}

// Transparent mode passes the caller's W3C trace context through to the business, which
// records it with the effect; a retry under another span is still the same command.
TEST_P(SidecarLedgerTest, TransparentModePassesTheCallersTraceThrough) {
  ledger::v1::TransferRequest t;
  t.set_from("a");
  t.set_to("b");
  t.set_amount(10);
  const std::string key = "Transfer:account/a:traced";
  for (const char* span : {"00f067aa0ba902b7", "b7ad6b7169203331"}) {
    grpc::ClientContext context;
    context.AddMetadata("idempotency-key", key);
    context.AddMetadata(kTenantHeader, "acme");
    context.AddMetadata("traceparent",
                        std::string("00-4bf92f3577b34da6a3ce929d0e0e4736-") + span + "-01");
    ledger::v1::TransferResponse response;
    grpc::Status status = transparent_->Transfer(&context, t, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }
  grpc::ClientContext context;
  context.AddMetadata(kComponentHeader, "checker");
  v1::ListEffectsRequest request;
  request.set_limit(1000);
  v1::ListEffectsResponse listed;
  ASSERT_TRUE(effects_->ListEffects(&context, request, &listed).ok());
  int applied = 0;
  for (const v1::Effect& e : listed.effects()) {
    if (e.command_id() != CommandIdOfKey(key)) continue;
    ++applied;
    EXPECT_EQ(e.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
    EXPECT_EQ(e.span_id(), "00f067aa0ba902b7");  // the call that applied it
  }
  EXPECT_EQ(applied, 1);
}

TEST_P(SidecarLedgerTest, TransparentModeDedupesByHeaderAndRefusesUnkeyedMutations) {
  ledger::v1::TransferRequest t;
  t.set_from("a");
  t.set_to("b");
  t.set_amount(10);
  ledger::v1::TransferResponse first, second;
  // The key shape of docs/design.md, '/' and ':' included: the command id is derived from it.
  const std::string key = "Transfer:account/a:pay-42";
  {
    grpc::ClientContext context;
    context.AddMetadata("idempotency-key", key);
    context.AddMetadata(kTenantHeader, "acme");
    grpc::Status status = transparent_->Transfer(&context, t, &first);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(first.from_balance(), 990);
  }
  {
    grpc::ClientContext context;
    context.AddMetadata("idempotency-key", key);
    context.AddMetadata(kTenantHeader, "acme");
    ASSERT_TRUE(transparent_->Transfer(&context, t, &second).ok());
    EXPECT_EQ(second.SerializeAsString(), first.SerializeAsString());
    auto replayed = context.GetServerInitialMetadata().find("eonce-replayed");
    ASSERT_NE(replayed, context.GetServerInitialMetadata().end());
  }
  EXPECT_EQ(EffectsOf(CommandIdOfKey(key)), 1);
  {
    grpc::ClientContext context;
    context.AddMetadata(kTenantHeader, "acme");
    ledger::v1::TransferResponse none;
    grpc::Status status = transparent_->Transfer(&context, t, &none);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  }
  {
    // Reads listed readonly pass through without a key.
    grpc::ClientContext context;
    context.AddMetadata(kTenantHeader, "acme");
    ledger::v1::GetAccountRequest get;
    get.set_id("a");
    ledger::v1::Account account;
    ASSERT_TRUE(transparent_->GetAccount(&context, get, &account).ok());
    EXPECT_EQ(account.balance(), 990);
  }
  EXPECT_EQ(Balance("a"), 990);
}

// Every call the sidecar forwards is checked against identity and policy, keyed or not,
// and a call without a key goes on only to a method the policy lists readonly.
TEST_P(SidecarLedgerTest, PassThroughFailsClosed) {
  auto get_account = [&](const std::string& tenant, const std::string& actor) {
    grpc::ClientContext context;
    if (!tenant.empty()) context.AddMetadata(kTenantHeader, tenant);
    if (!actor.empty()) context.AddMetadata(kActorHeader, actor);
    ledger::v1::GetAccountRequest get;
    get.set_id("a");
    ledger::v1::Account account;
    grpc::Status status = transparent_->GetAccount(&context, get, &account);
    return status.ok() ? std::string("OK") : FromGrpcStatus(status, &context).ToString();
  };
  EXPECT_EQ(get_account("acme", "alice"), "OK");  // the right identity reads
  EXPECT_NE(get_account("beta", "bob").find("POLICY_DENIED"), std::string::npos);
  EXPECT_NE(get_account("acme", "mallory").find("CREDENTIAL_REVOKED"), std::string::npos);
  EXPECT_NE(get_account("", "").find("NO_IDENTITY"), std::string::npos);

  // A mutation without a key is refused, whoever asks: nothing moves.
  ExpectUnkeyedTransfersRefused(*transparent_);

  // The business's effects, read by an operator through SidecarAdmin: each tenant sees
  // its own only.
  {
    grpc::ClientContext context;
    context.AddMetadata(kTenantHeader, "beta");
    context.AddMetadata("idempotency-key", "open-beta-1");
    ledger::v1::OpenAccountRequest open;
    open.set_id("beta-1");
    open.set_initial_balance(5);
    ledger::v1::Account account;
    grpc::Status status = transparent_->OpenAccount(&context, open, &account);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }
  auto effects_stub = v1::SidecarAdmin::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(sidecar_->port()), grpc::InsecureChannelCredentials()));
  {
    // The effect ledger is an operator's business.
    grpc::ClientContext context;
    context.AddMetadata(kTenantHeader, "acme");
    v1::ListEffectsResponse response;
    grpc::Status status = effects_stub->ListEffects(&context, v1::ListEffectsRequest(), &response);
    EXPECT_EQ(ReasonOf(FromGrpcStatus(status, &context)), "OPERATOR_REQUIRED");
  }
  auto effects_seen_by = [&](const std::string& tenant) {
    auto& stub = effects_stub;
    grpc::ClientContext context;
    context.AddMetadata(kTenantHeader, tenant);
    context.AddMetadata(kOperatorHeader, "oncall");
    v1::ListEffectsRequest request;
    request.set_limit(1000);
    v1::ListEffectsResponse response;
    grpc::Status status = stub->ListEffects(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    std::map<std::string, int> by_tenant;
    for (const auto& e : response.effects()) by_tenant[e.tenant()]++;
    return by_tenant;
  };
  auto beta = effects_seen_by("beta");
  EXPECT_EQ(beta.size(), 1u);
  EXPECT_EQ(beta["beta"], 1);
  auto acme = effects_seen_by("acme");
  EXPECT_EQ(acme.count("beta"), 0u);
  EXPECT_EQ(acme["acme"], 2);  // the two accounts the fixture opened

  // And the business's outcomes: an operator's, within the tenant.
  auto outcome_of = [&](const std::string& tenant, const std::string& operator_name) {
    grpc::ClientContext context;
    context.AddMetadata(kTenantHeader, tenant);
    if (!operator_name.empty()) context.AddMetadata(kOperatorHeader, operator_name);
    v1::QueryOutcomeRequest request;
    request.set_command_id("open-a");
    v1::QueryOutcomeResponse response;
    grpc::Status status = effects_stub->QueryOutcome(&context, request, &response);
    if (!status.ok()) return ReasonOf(FromGrpcStatus(status, &context));
    return std::string(response.applied() ? "applied" : "not applied");
  };
  EXPECT_EQ(outcome_of("acme", ""), "OPERATOR_REQUIRED");
  if (legacy_) {
    EXPECT_EQ(outcome_of("acme", "oncall"), "UNIMPLEMENTED");  // a legacy business keeps none
  } else {
    EXPECT_EQ(outcome_of("acme", "oncall"), "applied");
    EXPECT_EQ(outcome_of("beta", "oncall"), "not applied");  // acme's command, not beta's
  }
}

// Transparent mode forwards only the business's own methods, as its reflected catalog
// lists them. eonce's services (which the business serves to its sidecar and operators)
// and gRPC's are refused whatever the catalog and the policy say (here every one is
// listed readonly and allowed), keyed or not, whoever asks; a method the catalog does
// not list is UNIMPLEMENTED. The business's own methods still go on.
TEST_P(SidecarLedgerTest, TransparentModeForwardsOnlyTheBusinesssOwnMethods) {
  const std::vector<std::string> reserved = {
      "/eonce.v1.Forwards/ForwardBatch",
      "/eonce.v1.FollowUps/PullFollowUps",
      "/eonce.v1.FollowUps/AckFollowUps",
      "/eonce.v1.SlotData/ExportSlotData",
      "/eonce.v1.SlotData/DropSlotData",
      "/eonce.v1.Effects/ListEffects",
      "/eonce.v1.Outcome/QueryOutcome",
      "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
      "/grpc.testing.TestService/UnaryCall",
  };
  std::string policy = "act acme * *\nallow acme * *\noperator acme oncall\n"
                       "readonly /eonce.ledger.v1.Ledger/GetAccount\n";
  for (const std::string& method : reserved) policy += "readonly " + method + "\n";
  const std::string policy_path = testing::FreshDir("open-policy") + "/policy";
  FILE* f = fopen(policy_path.c_str(), "w");
  fputs(policy.c_str(), f);
  fclose(f);
  SidecarServerOptions options =
      testing::SidecarOptionsFor(ledger_->port(), testing::FreshDir("allowlist-sidecar"));
  options.policy_file = policy_path;
  auto sidecar = SidecarServer::Start(options, RealClock::Get());
  ASSERT_TRUE(sidecar.ok()) << sidecar.status();
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string((*sidecar)->port()),
                                     grpc::InsecureChannelCredentials());
  grpc::GenericStub generic(channel);
  auto call = [&](const std::string& method, bool keyed) {
    grpc::ClientContext context;
    context.AddMetadata(kTenantHeader, "acme");
    context.AddMetadata(kOperatorHeader, "oncall");  // an operator is refused all the same
    if (keyed) context.AddMetadata("idempotency-key", "key-of" + method);
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    grpc::Slice empty("");
    grpc::ByteBuffer request(&empty, 1);
    grpc::ByteBuffer response;
    grpc::Status status;
    absl::Notification done;
    generic.UnaryCall(&context, method, grpc::StubOptions(), &request, &response,
                      [&](grpc::Status s) {
                        status = std::move(s);
                        done.Notify();
                      });
    done.WaitForNotification();
    return FromGrpcStatus(status, &context);
  };
  for (const std::string& method : reserved) {
    for (bool keyed : {false, true}) {
      absl::Status refused = call(method, keyed);
      EXPECT_EQ(refused.code(), absl::StatusCode::kPermissionDenied) << method << " " << refused;
      EXPECT_EQ(ReasonOf(refused), "RESERVED_METHOD") << method << " " << refused;
    }
  }
  EXPECT_EQ((*sidecar)->deduper().stats().forwards.load(), 0);

  // A method the business's catalog does not list (asked again once the catalog is read,
  // if it was being read).
  for (const char* method : {"/eonce.ledger.v1.Ledger/Tranfser", "/other.v1.Service/Call"}) {
    absl::Status unknown = call(method, /*keyed=*/true);
    for (int i = 0; i < 3 && ReasonOf(unknown) == "CATALOG_PENDING"; ++i) {
      EXPECT_TRUE((*sidecar)->AwaitCatalog(absl::Seconds(10)));
      unknown = call(method, /*keyed=*/true);
    }
    EXPECT_EQ(unknown.code(), absl::StatusCode::kUnimplemented) << method << " " << unknown;
    EXPECT_EQ(ReasonOf(unknown), "UNKNOWN_METHOD") << method << " " << unknown;
  }

  // The business's own methods go on: a read without a key, a transfer with one.
  auto ledger = ledger::v1::Ledger::NewStub(channel);
  grpc::ClientContext read_context;
  read_context.AddMetadata(kTenantHeader, "acme");
  ledger::v1::GetAccountRequest get;
  get.set_id("a");
  ledger::v1::Account account;
  ASSERT_TRUE(ledger->GetAccount(&read_context, get, &account).ok());
  EXPECT_EQ(account.balance(), 1000);
  grpc::ClientContext keyed_context;
  keyed_context.AddMetadata(kTenantHeader, "acme");
  keyed_context.AddMetadata("idempotency-key", "allowlisted-transfer");
  ledger::v1::TransferResponse moved;
  ASSERT_TRUE(ledger->Transfer(&keyed_context, AToB(10), &moved).ok());
  EXPECT_EQ(Balance("a"), 990);
  ASSERT_TRUE((*sidecar)->Shutdown(1000).ok());
}

// Without a policy file nothing is listed readonly: every unkeyed call is refused, reads
// included, and keyed commands still run.
TEST_P(SidecarLedgerTest, WithoutAPolicyFileUnkeyedCallsAreRefused) {
  auto open = SidecarServer::Start(
      testing::SidecarOptionsFor(ledger_->port(), testing::FreshDir("open-sidecar")),
      RealClock::Get());
  ASSERT_TRUE(open.ok()) << open.status();
  auto stub = ledger::v1::Ledger::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string((*open)->port()), grpc::InsecureChannelCredentials()));
  ExpectUnkeyedTransfersRefused(*stub);
  {
    grpc::ClientContext context;
    context.AddMetadata(kTenantHeader, "acme");
    ledger::v1::GetAccountRequest get;
    get.set_id("a");
    ledger::v1::Account account;
    EXPECT_EQ(stub->GetAccount(&context, get, &account).error_code(),
              grpc::StatusCode::FAILED_PRECONDITION);
  }
  {
    grpc::ClientContext context;
    context.AddMetadata(kTenantHeader, "acme");
    context.AddMetadata("idempotency-key", "keyed-transfer");
    ledger::v1::TransferResponse moved;
    ASSERT_TRUE(stub->Transfer(&context, AToB(10), &moved).ok());
  }
  EXPECT_EQ(Balance("a"), 990);
  ASSERT_TRUE((*open)->Shutdown(1000).ok());
}

TEST_P(SidecarLedgerTest, LostAnswerIsRecoveredExactlyOrParkedByMode) {
  faults_.armed = true;
  v1::Command c = TransferCommand("lost", 7);
  auto first = Submit(c);
  EXPECT_EQ(ReasonOf(first.status()), "OUTCOME_PENDING");
  auto second = Submit(c);
  if (legacy_) {
    // The business cannot say whether it applied the transfer: parked, never re-sent.
    EXPECT_EQ(ReasonOf(second.status()), "OUTCOME_UNKNOWN");
    EXPECT_EQ(ReasonOf(Submit(c).status()), "OUTCOME_UNKNOWN");
    EXPECT_EQ(sidecar_->records().parked_count(), 1);
  } else {
    ASSERT_TRUE(second.ok()) << second.status();
    ledger::v1::TransferResponse recovered;
    ASSERT_TRUE(recovered.ParseFromString(second->result().response()));
    EXPECT_EQ(recovered.from_balance(), 993);
    EXPECT_EQ(Submit(c)->disposition(), v1::REPLAYED);
  }
  EXPECT_EQ(EffectsOf("lost"), 1);
  EXPECT_EQ(Balance("a"), 993);
  ExpectConserved();
}

TEST_P(SidecarLedgerTest, UnreachableBusinessIsRefusedWithNothingStored) {
  ASSERT_TRUE(ledger_->Shutdown(0).ok());
  auto refused = Submit(TransferCommand("t9", 5));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  v1::ReconcileRequest reconcile;
  reconcile.set_command_id("t9");
  grpc::ClientContext context;
  context.AddMetadata(kTenantHeader, "acme");
  v1::ReconcileResponse state;
  ASSERT_TRUE(sidecar_stub_->Reconcile(&context, reconcile, &state).ok());
  EXPECT_EQ(state.state(), v1::RECORD_NOT_SEEN);
}

// A typo in the method, or bytes the service cannot parse, say nothing about the
// business: they are refused, nothing is stored, and the key stays free for the command
// once it is corrected.
TEST_P(SidecarLedgerTest, UnimplementedIsRefusedNotStoredAsABusinessAnswer) {
  auto state_of = [&](const std::string& key) {
    v1::ReconcileRequest reconcile;
    reconcile.set_idempotency_key(key);
    grpc::ClientContext context;
    context.AddMetadata(kTenantHeader, "acme");
    v1::ReconcileResponse state;
    EXPECT_TRUE(sidecar_stub_->Reconcile(&context, reconcile, &state).ok());
    return state.state();
  };
  // The sidecar learned the ledger's methods by server reflection: a typo is refused
  // before anything is written or forwarded.
  const int64_t forwards_before = sidecar_->deduper().stats().forwards.load();
  v1::Command typo = TransferCommand("typo", 5);
  typo.set_target_method("/eonce.ledger.v1.Ledger/Tranfser");
  typo.set_idempotency_key("pay-5");
  FillPayloadHash(&typo);
  auto refused = SubmitOnceCatalogRead(typo);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReasonOf(refused.status()), "UNKNOWN_METHOD");
  EXPECT_NE(refused.status().message().find("Tranfser"), absl::string_view::npos)
      << refused.status();
  EXPECT_EQ(sidecar_->deduper().stats().forwards.load(), forwards_before);
  EXPECT_EQ(state_of("pay-5"), v1::RECORD_NOT_SEEN);

  v1::Command garbage = MakeCommand("garbage", "/eonce.ledger.v1.Ledger/Transfer",
                                    std::string("\xff\xff\xff\xff", 4));
  garbage.set_idempotency_key("pay-garbage");
  FillPayloadHash(&garbage);
  auto unparsed = Submit(garbage);
  EXPECT_FALSE(unparsed.ok());
  EXPECT_EQ(ReasonOf(unparsed.status()), "UPSTREAM_UNIMPLEMENTED") << unparsed.status();
  EXPECT_EQ(state_of("pay-garbage"), v1::RECORD_NOT_SEEN) << unparsed.status();

  // Corrected, the same key applies once.
  v1::Command fixed = TransferCommand("fixed", 5);
  fixed.set_idempotency_key("pay-5");
  FillPayloadHash(&fixed);
  auto applied = Submit(fixed);
  ASSERT_TRUE(applied.ok()) << applied.status();
  EXPECT_EQ(applied->disposition(), v1::APPLIED);
  EXPECT_EQ(applied->result().code(), 0);
  EXPECT_EQ(EffectsOf("fixed"), 1);
}

TEST_P(SidecarLedgerTest, GetInfoAdvertisesRetentionAndLimits) {
  grpc::ClientContext context;
  v1::GetInfoResponse info;
  ASSERT_TRUE(sidecar_stub_->GetInfo(&context, v1::GetInfoRequest(), &info).ok());
  EXPECT_EQ(info.retention_ms(), 7LL * 24 * 3600 * 1000);
  EXPECT_EQ(info.lease_ms(), 2'000);
  EXPECT_TRUE(info.identity_from_headers());  // no mutual TLS here
  EXPECT_EQ(info.max_key_bytes(), 256);
}

INSTANTIATE_TEST_SUITE_P(Modes, SidecarLedgerTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Legacy" : "Inbox"; });

}  // namespace
}  // namespace eonce
