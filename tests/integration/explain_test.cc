// `eonce explain` against the real stack: a real agent, sidecar(s) and ledger(s) over
// loopback gRPC, each on a real RocksDB; explain reads them as an operator, as the binary
// does (tools/explain/grpc_views.h). The verdict for an applied command, a duplicate, a
// conflict, a parked unknown outcome and a cross-shard transfer; a partial journey when
// the sidecar is down; the binary's exit codes.
#include <cstdio>
#include <fstream>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/base/clock.h"
#include "common/coord/memory_map_store.h"
#include "common/base/fault.h"
#include "common/base/random.h"
#include "common/coord/slots.h"
#include "dedupe_sidecar/doors/sidecar_service.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "outbox_agent/doors/agent_server.h"
#include "outbox_agent/client/client.h"
#include "services/inbox/inbox.h"
#include "services/ledger/ledger_service.h"
#include "tests/integration/ledger_calls.h"
#include "tests/integration/sharded_sidecars.h"
#include "tests/util/agent_wait.h"
#include "tests/util/temp_dir.h"
#include "tests/util/lose_one_answer.h"
#include "tools/explain/explainer.h"
#include "tools/explain/grpc_views.h"
#include "tools/explain/render.h"

namespace eonce {
namespace {

constexpr char kPolicy[] = "act acme * *\nallow acme * *\noperator acme oncall\nplatform acme root\n";

std::string PolicyFile() {
  std::string path = testing::FreshDir("policy") + "/policy";
  std::ofstream(path) << kPolicy;
  return path;
}

v1::Entity Account(const std::string& id) {
  v1::Entity e;
  e.set_type("account");
  e.set_id(id);
  return e;
}

// Explains `query` as the binary does: over gRPC, as operator "oncall" of acme.
v1::Journey ExplainOver(const std::string& query, const std::vector<std::string>& agents,
                        const std::vector<std::string>& sidecars) {
  explain::Caller caller;
  caller.tenant = "acme";
  caller.operator_name = "oncall";
  std::vector<std::unique_ptr<explain::AgentView>> a;
  std::vector<explain::AgentView*> av;
  for (const auto& address : agents) {
    a.push_back(explain::NewGrpcAgentView(address, caller));
    av.push_back(a.back().get());
  }
  std::vector<std::unique_ptr<explain::ShardView>> s;
  std::vector<explain::ShardView*> sv;
  for (const auto& address : explain::ExpandShards(sidecars, caller)) {
    s.push_back(explain::NewGrpcShardView(address, caller));
    sv.push_back(s.back().get());
  }
  explain::ExplainOptions options;
  options.tenant = "acme";
  auto journey = explain::Explain(query, options, av, sv);
  EXPECT_TRUE(journey.ok()) << journey.status();
  return journey.ok() ? *journey : v1::Journey();
}

std::vector<std::string> KindsOf(const v1::Journey& j) {
  std::vector<std::string> kinds;
  for (const auto& e : j.events()) kinds.push_back(e.kind());
  return kinds;
}

bool Has(const std::vector<std::string>& kinds, const std::string& kind) {
  return std::find(kinds.begin(), kinds.end(), kind) != kinds.end();
}

class ExplainTest : public ::testing::Test {
 protected:
  void StartStack(bool legacy) {
    LedgerServerOptions ledger_options;
    ledger_options.data_dir = testing::FreshDir("ledger");
    ledger_options.legacy_mode = legacy;
    ledger_options.faults = &faults_;
    auto ledger = LedgerServer::Start(ledger_options, RealClock::Get());
    ASSERT_TRUE(ledger.ok()) << ledger.status();
    ledger_ = std::move(*ledger);
    SidecarServerOptions options =
        testing::SidecarOptionsFor(ledger_->port(), testing::FreshDir("sidecar"));
    options.policy_file = PolicyFile();
    auto sidecar = SidecarServer::Start(options, RealClock::Get());
    ASSERT_TRUE(sidecar.ok()) << sidecar.status();
    sidecar_ = std::move(*sidecar);
    sidecar_address_ = absl::StrCat("127.0.0.1:", sidecar_->port());
    sidecar_stub_ = v1::Sidecar::NewStub(
        grpc::CreateChannel(sidecar_address_, grpc::InsecureChannelCredentials()));

    AgentServerOptions agent_options;
    agent_options.data_dir = testing::FreshDir("agent");
    agent_options.tenant = "acme";
    agent_options.default_sidecar = sidecar_address_;
    agent_options.idle_pump_ms = 5;
    auto agent = AgentServer::Start(agent_options, RealClock::Get(), RealRandom::Get());
    ASSERT_TRUE(agent.ok()) << agent.status();
    agent_ = std::move(*agent);
    agent_address_ = absl::StrCat("127.0.0.1:", agent_->port());
    client_ = AgentClient::Connect(agent_address_);
  }

  void TearDown() override {
    if (agent_ != nullptr) {
      EXPECT_TRUE(agent_->Shutdown(1000).ok());
    }
    if (sidecar_ != nullptr) {
      EXPECT_TRUE(sidecar_->Shutdown(1000).ok());
    }
    if (ledger_ != nullptr) {
      EXPECT_TRUE(ledger_->Shutdown(1000).ok());
    }
  }

  // Opens accounts a (1000) and b (0) and pays 30 from a to b as command "pay-1".
  v1::OutboxRecord Pay() {
    for (const auto& [id, balance] : {std::pair<std::string, int>{"a", 1000}, {"b", 0}}) {
      ledger::v1::OpenAccountRequest open;
      open.set_id(id);
      open.set_initial_balance(balance);
      EnqueueOptions o;
      o.command_id = "open-" + id;
      EXPECT_TRUE(client_->Enqueue(testing::kOpenAccountMethod, open, Account(id), o).ok());
      EXPECT_EQ(Final("open-" + id).state(), v1::ACKED);
    }
    EnqueueOptions o;
    o.command_id = "pay-1";
    EXPECT_TRUE(client_->Enqueue(testing::kTransferMethod, testing::AToB(30), Account("a"), o).ok());
    return Final("pay-1");
  }

  v1::OutboxRecord Final(const std::string& id) {
    auto record = testing::WaitUntilFinal(client_->stub(), id);
    EXPECT_TRUE(record.ok()) << record.status();
    return record.ok() ? *record : v1::OutboxRecord();
  }

  v1::Journey ExplainIt(const std::string& query) {
    return ExplainOver(query, {agent_address_}, {sidecar_address_});
  }

  LoseOneAnswer faults_;
  std::unique_ptr<LedgerServer> ledger_;
  std::unique_ptr<SidecarServer> sidecar_;
  std::unique_ptr<AgentServer> agent_;
  std::unique_ptr<AgentClient> client_;
  std::unique_ptr<v1::Sidecar::Stub> sidecar_stub_;
  std::string sidecar_address_;
  std::string agent_address_;
};

TEST_F(ExplainTest, AnAppliedCommandIsAppliedOnceWithItsWholeJourney) {
  StartStack(/*legacy=*/false);
  v1::OutboxRecord paid = Pay();
  ASSERT_EQ(paid.state(), v1::ACKED);
  v1::Journey j = ExplainIt("pay-1");
  EXPECT_EQ(j.verdict(), v1::VERDICT_APPLIED_ONCE) << explain::RenderText(j);
  EXPECT_EQ(j.verdict_text(), "applied once");
  EXPECT_EQ(j.effects(), 1);
  EXPECT_GT(j.effect_seq(), 0u);
  EXPECT_TRUE(j.books_agree());
  EXPECT_EQ(j.entity(), "account/a");
  EXPECT_EQ(j.target_method(), testing::kTransferMethod);
  std::vector<std::string> kinds = KindsOf(j);
  EXPECT_EQ(kinds.front(), "enqueued") << explain::RenderText(j);
  for (const char* kind : {"attempt", "committed", "applied"}) EXPECT_TRUE(Has(kinds, kind)) << kind;
  for (int i = 1; i < j.events_size(); ++i) {
    EXPECT_LE(j.events(i - 1).at_ms(), j.events(i).at_ms()) << explain::RenderText(j);
  }
  // Asked by its key, it is the same command.
  v1::Journey by_key = ExplainIt(paid.command().idempotency_key());
  EXPECT_EQ(by_key.command_id(), "pay-1");
  EXPECT_EQ(by_key.verdict(), v1::VERDICT_APPLIED_ONCE);
}

TEST_F(ExplainTest, ADuplicateIsAnsweredFromTheStoredResponseAndStillAppliedOnce) {
  StartStack(/*legacy=*/false);
  v1::OutboxRecord paid = Pay();
  auto replayed = testing::SubmitTo(*sidecar_stub_, paid.command());
  ASSERT_TRUE(replayed.ok()) << replayed.status();
  ASSERT_EQ(replayed->disposition(), v1::REPLAYED);
  v1::Journey j = ExplainIt("pay-1");
  EXPECT_EQ(j.verdict(), v1::VERDICT_DUPLICATE) << explain::RenderText(j);
  EXPECT_EQ(j.effects(), 1);
  EXPECT_TRUE(Has(KindsOf(j), "duplicate_returned"));
}

TEST_F(ExplainTest, ASecondPayloadUnderTheSameKeyIsAConflict) {
  StartStack(/*legacy=*/false);
  v1::OutboxRecord paid = Pay();
  EnqueueOptions o;
  o.command_id = "pay-2";
  o.idempotency_key = paid.command().idempotency_key();
  ASSERT_TRUE(client_->Enqueue(testing::kTransferMethod, testing::AToB(99), Account("a"), o).ok());
  ASSERT_EQ(Final("pay-2").state(), v1::CONFLICT);
  v1::Journey j = ExplainIt("pay-2");
  EXPECT_EQ(j.verdict(), v1::VERDICT_CONFLICT) << explain::RenderText(j);
  EXPECT_EQ(j.effects(), 0);
  // The key's holder is still applied once.
  EXPECT_EQ(ExplainIt("pay-1").verdict(), v1::VERDICT_APPLIED_ONCE);
}

TEST_F(ExplainTest, AnUnknownOutcomeParkedByTheSidecarSaysHowToResolveIt) {
  StartStack(/*legacy=*/true);  // a business without an inbox cannot say what it applied
  ASSERT_TRUE(testing::SubmitTo(*sidecar_stub_, testing::OpenAccountCommand("a", 1000)).ok());
  ASSERT_TRUE(testing::SubmitTo(*sidecar_stub_, testing::OpenAccountCommand("b", 0)).ok());
  faults_.armed = true;
  v1::Command lost = testing::TransferCommand("lost", 7);
  EXPECT_EQ(ReasonOf(testing::SubmitTo(*sidecar_stub_, lost).status()), "OUTCOME_PENDING");
  EXPECT_EQ(ReasonOf(testing::SubmitTo(*sidecar_stub_, lost).status()), "OUTCOME_UNKNOWN");
  v1::Journey j = ExplainIt("lost");
  EXPECT_EQ(j.verdict(), v1::VERDICT_PARKED) << explain::RenderText(j);
  EXPECT_TRUE(Has(KindsOf(j), "parked_unknown"));
  // The effect is there (the answer was lost after it): resolve as applied.
  EXPECT_EQ(j.effects(), 1) << explain::RenderText(j);
  EXPECT_NE(j.verdict_text().find(absl::StrCat("resolve --key=", lost.idempotency_key(),
                                               " --applied")),
            std::string::npos)
      << j.verdict_text();
}

TEST_F(ExplainTest, ADownSidecarGivesAPartialJourneyAndAnUnknownCommandIsNotFound) {
  StartStack(/*legacy=*/false);
  Pay();
  EXPECT_EQ(ExplainIt("never-sent").verdict(), v1::VERDICT_NOT_FOUND);
  ASSERT_TRUE(sidecar_->Shutdown(0).ok());
  sidecar_.reset();
  v1::Journey j = ExplainIt("pay-1");
  // The agent alone says it was applied; what the sidecar and business hold is unread.
  EXPECT_EQ(j.verdict(), v1::VERDICT_APPLIED_ONCE) << explain::RenderText(j);
  EXPECT_FALSE(j.books_agree());
  ASSERT_GE(j.unread_size(), 1);
  EXPECT_NE(j.unread(0).find(sidecar_address_), std::string::npos) << j.unread(0);
  EXPECT_NE(j.verdict_text().find("the business was not read"), std::string::npos);
}

// The explain binary: its exit codes and its JSON.
TEST_F(ExplainTest, TheBinaryPrintsTheVerdictAndExitsByWhatItFound) {
  StartStack(/*legacy=*/false);
  Pay();
  auto run = [&](const std::string& args, std::string* out) {
    std::string command = absl::StrCat("tools/explain/explain --agent=", agent_address_,
                                       " --sidecar=", sidecar_address_, " ", args, " 2>&1");
    FILE* p = popen(command.c_str(), "r");
    char buffer[4096];
    out->clear();
    while (p != nullptr && fgets(buffer, sizeof buffer, p) != nullptr) out->append(buffer);
    int status = p == nullptr ? -1 : pclose(p);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  std::string out;
  EXPECT_EQ(run("pay-1", &out), 0) << out;
  EXPECT_NE(out.find("verdict: applied once\n"), std::string::npos) << out;
  EXPECT_EQ(run("--json pay-1", &out), 0) << out;
  EXPECT_NE(out.find("\"verdict\":\"VERDICT_APPLIED_ONCE\""), std::string::npos) << out;
  EXPECT_EQ(run("never-sent", &out), 3) << out;
  EXPECT_NE(out.find("NOT_FOUND"), std::string::npos) << out;
  EXPECT_EQ(run("'bad\tid'", &out), 2) << out;
  EXPECT_NE(out.find("MALFORMED_QUERY"), std::string::npos) << out;
}

// A transfer between accounts on two shards: the debit at one ledger emits the credit,
// which the agent relays to the other shard. Explain finds both, applied once each.
TEST(ExplainShardsTest, ACrossShardTransferIsAppliedOnceAtEachShard) {
  constexpr int kShards = 2;
  MemoryMapStore store{RealClock::Get()};
  std::unique_ptr<LedgerServer> ledgers[kShards];
  std::unique_ptr<ShardLease> leases[kShards];
  std::unique_ptr<SidecarServer> sidecars[kShards];
  std::unique_ptr<v1::Sidecar::Stub> stubs[kShards];
  const std::string policy = PolicyFile();
  for (int i = 0; i < kShards; ++i) {
    LedgerServerOptions options;
    options.data_dir = testing::FreshDir(absl::StrCat("xledger", i));
    options.ledger.cross_slot_credits = true;
    auto ledger = LedgerServer::Start(options, RealClock::Get());
    ASSERT_TRUE(ledger.ok()) << ledger.status();
    ledgers[i] = std::move(*ledger);
  }
  ASSERT_TRUE(testing::StartShardedSidecars(
                  store, kShards,
                  [&](int i) {
                    SidecarServerOptions o = testing::SidecarOptionsFor(
                        ledgers[i]->port(), testing::FreshDir(absl::StrCat("xsidecar", i)));
                    o.policy_file = policy;
                    return o;
                  },
                  leases, sidecars, stubs)
                  .ok());
  auto map = store.Read();
  ASSERT_TRUE(map.ok());
  auto owner = [&](const std::string& id) {
    return map->OwnerOf(SlotOf("acme", "account", id)) == "s0" ? 0 : 1;
  };
  std::string from, to;
  for (int n = 0; from.empty() || to.empty(); ++n) {
    std::string id = absl::StrCat("acct-", n);
    if (owner(id) == 0 && from.empty()) from = id;
    if (owner(id) == 1 && to.empty()) to = id;
  }
  const std::string s0 = absl::StrCat("127.0.0.1:", sidecars[0]->port());

  AgentServerOptions options;
  options.data_dir = testing::FreshDir("xagent");
  options.tenant = "acme";
  options.routes = absl::StrCat("eonce.ledger.v1.Ledger=sharded:", s0);
  options.idle_pump_ms = 5;
  options.relay_from = absl::StrCat("127.0.0.1:", ledgers[0]->port());
  options.relay_every_ms = 5;
  auto agent = AgentServer::Start(options, RealClock::Get(), RealRandom::Get());
  ASSERT_TRUE(agent.ok()) << agent.status();
  const std::string agent_address = absl::StrCat("127.0.0.1:", (*agent)->port());
  auto client = AgentClient::Connect(agent_address);
  for (const std::string& id : {from, to}) {
    ledger::v1::OpenAccountRequest open;
    open.set_id(id);
    open.set_initial_balance(id == from ? 100 : 0);
    EnqueueOptions o;
    o.command_id = "open-" + id;
    ASSERT_TRUE(client->Enqueue(testing::kOpenAccountMethod, open, Account(id), o).ok());
    ASSERT_EQ(testing::WaitUntilFinal(client->stub(), "open-" + id)->state(), v1::ACKED);
  }
  ledger::v1::TransferRequest transfer;
  transfer.set_from(from);
  transfer.set_to(to);
  transfer.set_amount(40);
  EnqueueOptions o;
  o.command_id = "xpay";
  ASSERT_TRUE(client->Enqueue(testing::kTransferMethod, transfer, Account(from), o).ok());
  ASSERT_EQ(testing::WaitUntilFinal(client->stub(), "xpay")->state(), v1::ACKED);
  const std::string credit = Inbox::FollowUpCommandId("acme", "xpay", 0);
  auto relayed = testing::WaitUntilFinal(client->stub(), credit);
  ASSERT_TRUE(relayed.ok()) << relayed.status();
  ASSERT_EQ(relayed->state(), v1::ACKED);

  // Asked of one sidecar: its slot map names the other.
  v1::Journey j = ExplainOver("xpay", {agent_address}, {s0});
  EXPECT_EQ(j.verdict(), v1::VERDICT_APPLIED_ONCE) << explain::RenderText(j);
  ASSERT_EQ(j.follow_ups_size(), 1) << explain::RenderText(j);
  EXPECT_EQ(j.follow_ups(0).command_id(), credit);
  EXPECT_EQ(j.follow_ups(0).effects(), 1);
  EXPECT_EQ(j.follow_ups(0).where(), absl::StrCat("127.0.0.1:", sidecars[1]->port()));
  EXPECT_TRUE(j.books_agree());
  EXPECT_TRUE(Has(KindsOf(j), "follow_up_applied"));

  ASSERT_TRUE((*agent)->Shutdown(1000).ok());
  for (int i = 0; i < kShards; ++i) {
    EXPECT_TRUE(sidecars[i]->Shutdown(1000).ok());
    EXPECT_TRUE(ledgers[i]->Shutdown(1000).ok());
  }
}

}  // namespace
}  // namespace eonce
