// The walking skeleton, end to end: a command goes from Enqueue on the real agent through
// the real sidecar to the real ledger, over gRPC on loopback ports, with every store a
// real RocksDB in a temporary folder. Then duplicates: none is applied twice.

#include "common/base/clock.h"
#include "common/command/command.h"
#include "common/base/random.h"
#include "dedupe_sidecar/doors/sidecar_service.h"
#include "eonce/ledger/v1/ledger.grpc.pb.h"
#include "eonce/v1/outcome.grpc.pb.h"
#include "google/protobuf/unknown_field_set.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "outbox_agent/doors/agent_server.h"
#include "outbox_agent/client/client.h"
#include "services/ledger/ledger_service.h"
#include "tests/util/agent_wait.h"
#include "tests/util/temp_dir.h"

namespace eonce {
namespace {

class PipelineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    LedgerServerOptions ledger_options;
    ledger_options.data_dir = testing::FreshDir("ledger");
    auto ledger = LedgerServer::Start(ledger_options, RealClock::Get());
    ASSERT_TRUE(ledger.ok()) << ledger.status();
    ledger_ = std::move(*ledger);

    SidecarServerOptions sidecar_options;
    sidecar_options.data_dir = testing::FreshDir("sidecar");
    sidecar_options.upstream_address = "127.0.0.1:" + std::to_string(ledger_->port());
    // The message limit the sidecar's binary sets: its largest request plus 1 MiB.
    sidecar_options.max_message_bytes =
        static_cast<int>(sidecar_options.deduper.limits.max_request_bytes) + (1 << 20);
    auto sidecar = SidecarServer::Start(sidecar_options, RealClock::Get());
    ASSERT_TRUE(sidecar.ok()) << sidecar.status();
    sidecar_ = std::move(*sidecar);

    StartAgent();
    auto to_ledger = grpc::CreateChannel("127.0.0.1:" + std::to_string(ledger_->port()),
                                         grpc::InsecureChannelCredentials());
    ledger_stub_ = ledger::v1::Ledger::NewStub(to_ledger);
    effects_ = v1::Effects::NewStub(to_ledger);
  }

  void StartAgent() {
    AgentServerOptions agent_options;
    agent_options.data_dir = agent_dir_;
    agent_options.tenant = "acme";
    agent_options.default_sidecar = "127.0.0.1:" + std::to_string(sidecar_->port());
    agent_options.idle_pump_ms = 5;
    auto agent = AgentServer::Start(agent_options, RealClock::Get(), RealRandom::Get());
    ASSERT_TRUE(agent.ok()) << agent.status();
    agent_ = std::move(*agent);
    client_ = AgentClient::Connect("127.0.0.1:" + std::to_string(agent_->port()));
  }

  v1::OutboxRecord WaitFinal(const std::string& command_id) {
    absl::StatusOr<v1::OutboxRecord> record =
        testing::WaitUntilFinal(client_->stub(), command_id);
    EXPECT_TRUE(record.ok()) << record.status();
    return record.ok() ? *record : v1::OutboxRecord();
  }

  std::map<std::string, int> EffectCounts() {
    grpc::ClientContext context;
    context.AddMetadata(kComponentHeader, "checker");
    v1::ListEffectsRequest request;
    request.set_limit(10000);
    v1::ListEffectsResponse response;
    EXPECT_TRUE(effects_->ListEffects(&context, request, &response).ok());
    std::map<std::string, int> counts;
    for (const auto& e : response.effects()) counts[e.command_id()]++;
    return counts;
  }

  v1::Entity Account(const std::string& id) {
    v1::Entity e;
    e.set_type("account");
    e.set_id(id);
    return e;
  }

  std::string agent_dir_ = testing::FreshDir("agent");
  std::unique_ptr<LedgerServer> ledger_;
  std::unique_ptr<SidecarServer> sidecar_;
  std::unique_ptr<AgentServer> agent_;
  std::unique_ptr<AgentClient> client_;
  std::unique_ptr<ledger::v1::Ledger::Stub> ledger_stub_;
  std::unique_ptr<v1::Effects::Stub> effects_;
};

TEST_F(PipelineTest, EnqueuedCommandReachesTheBusinessOnceAndDuplicatesAreNotApplied) {
  ledger::v1::OpenAccountRequest open;
  open.set_id("alice");
  open.set_initial_balance(100);
  auto alice = client_->Enqueue("/eonce.ledger.v1.Ledger/OpenAccount", open, Account("alice"));
  ASSERT_TRUE(alice.ok()) << alice.status();
  open.set_id("bob");
  open.set_initial_balance(0);
  auto bob = client_->Enqueue("/eonce.ledger.v1.Ledger/OpenAccount", open, Account("bob"));
  ASSERT_TRUE(bob.ok()) << bob.status();

  ledger::v1::TransferRequest transfer;
  transfer.set_from("alice");
  transfer.set_to("bob");
  transfer.set_amount(30);
  EnqueueOptions options;
  options.command_id = "pay-1";
  auto pay = client_->Enqueue("/eonce.ledger.v1.Ledger/Transfer", transfer, Account("alice"),
                              options);
  ASSERT_TRUE(pay.ok()) << pay.status();

  EXPECT_EQ(WaitFinal(alice->command().command_id()).state(), v1::ACKED);
  EXPECT_EQ(WaitFinal(bob->command().command_id()).state(), v1::ACKED);
  v1::OutboxRecord paid = WaitFinal("pay-1");
  ASSERT_EQ(paid.state(), v1::ACKED);
  ledger::v1::TransferResponse response;
  ASSERT_TRUE(response.ParseFromString(paid.result().response()));
  EXPECT_EQ(response.from_balance(), 70);
  EXPECT_EQ(response.to_balance(), 30);

  // The producer submits the same command again (a double click, a retry): the agent
  // returns the existing record and nothing new goes out.
  auto again = client_->Enqueue("/eonce.ledger.v1.Ledger/Transfer", transfer, Account("alice"),
                                options);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->state(), v1::ACKED);

  // Another agent (a second device, a restored backup) replays the same command straight
  // at the sidecar: the sidecar answers with the stored response, no second effect.
  auto direct = v1::Sidecar::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(sidecar_->port()), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.AddMetadata("eonce-tenant", "acme");
  v1::SubmitRequest replay;
  *replay.mutable_command() = paid.command();
  v1::SubmitResponse replayed;
  ASSERT_TRUE(direct->Submit(&context, replay, &replayed).ok());
  EXPECT_EQ(replayed.disposition(), v1::REPLAYED);
  EXPECT_EQ(replayed.result().response(), paid.result().response());

  auto counts = EffectCounts();
  EXPECT_EQ(counts["pay-1"], 1);
  EXPECT_EQ(counts.size(), 3u);
  grpc::ClientContext total_context;
  total_context.AddMetadata(kComponentHeader, "checker");
  ledger::v1::GetTotalResponse total;
  ASSERT_TRUE(ledger_stub_->GetTotal(&total_context, ledger::v1::GetTotalRequest(), &total).ok());
  EXPECT_EQ(total.total_balance(), 100);
  EXPECT_EQ(total.total_minted(), 100);
}

TEST_F(PipelineTest, AgentRestartKeepsAndFinishesItsWork) {
  ledger::v1::OpenAccountRequest open;
  for (int i = 0; i < 20; ++i) {
    open.set_id("acct" + std::to_string(i));
    open.set_initial_balance(i);
    EnqueueOptions options;
    options.command_id = "open-" + std::to_string(i);
    ASSERT_TRUE(client_->Enqueue("/eonce.ledger.v1.Ledger/OpenAccount", open,
                                 Account(open.id()), options)
                    .ok());
  }
  ASSERT_TRUE(agent_->Shutdown(0).ok());
  agent_.reset();
  StartAgent();
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(WaitFinal("open-" + std::to_string(i)).state(), v1::ACKED) << i;
  }
  for (const auto& [id, n] : EffectCounts()) EXPECT_EQ(n, 1) << id;
  EXPECT_EQ(EffectCounts().size(), 20u);
}


// Commands of 600 KiB each, under the 1 MiB a command may carry: the agent's batches of
// them stay within the sidecar's message limit (its largest request plus 1 MiB), so each
// is applied once and acknowledged at its first attempt, with no attempt refused.
TEST_F(PipelineTest, LargeCommandsGoThroughAtTheirFirstAttempt) {
  constexpr int kCommands = 24;
  ASSERT_TRUE(agent_->credential().Set(1, /*revoked=*/true).ok());  // hold the replay
  for (int i = 0; i < kCommands; ++i) {
    ledger::v1::OpenAccountRequest open;
    open.set_id("big" + std::to_string(i));
    open.set_initial_balance(1);
    // A field the ledger does not know: it keeps the command large and changes nothing.
    open.GetReflection()->MutableUnknownFields(&open)->AddLengthDelimited(
        1000, std::string(600 << 10, 'x'));
    EnqueueOptions options;
    options.command_id = "big-" + std::to_string(i);
    auto enqueued = client_->Enqueue("/eonce.ledger.v1.Ledger/OpenAccount", open,
                                     Account(open.id()), options);
    ASSERT_TRUE(enqueued.ok()) << enqueued.status();
  }
  // Released together, the 24 are due at once and the agent sends them side by side.
  ASSERT_TRUE(agent_->credential().Set(2, /*revoked=*/false).ok());
  agent_->Kick();
  for (int i = 0; i < kCommands; ++i) {
    v1::OutboxRecord record = WaitFinal("big-" + std::to_string(i));
    EXPECT_EQ(record.state(), v1::ACKED) << i;
    EXPECT_EQ(record.attempt(), 1u) << i << ": an attempt was refused";
  }
  EXPECT_EQ(agent_->replayer().stats().retries_retryable.load(), 0);
  auto counts = EffectCounts();
  EXPECT_EQ(counts.size(), static_cast<size_t>(kCommands));
  for (const auto& [id, n] : counts) EXPECT_EQ(n, 1) << id;
}

}  // namespace
}  // namespace eonce
