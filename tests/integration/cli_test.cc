// The operator tools against real servers: sidecarctl (audit, chain verification,
// reconcile), effectsctl (effect counts) and outboxctl (stats, show).
#include <sys/wait.h>

#include <cstdio>
#include <string>

#include "common/base/clock.h"
#include "common/command/command.h"
#include "common/base/random.h"
#include "dedupe_sidecar/doors/sidecar_service.h"
#include "eonce/ledger/v1/ledger.grpc.pb.h"
#include "eonce/v1/agent.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "outbox_agent/doors/agent_server.h"
#include "services/ledger/ledger_service.h"
#include "tests/util/agent_wait.h"
#include "tests/util/temp_dir.h"

namespace eonce {
namespace {

struct ToolRun {
  int exit_code;
  std::string out;
};

// Runs a tool from the test's runfiles and captures its output.
ToolRun Tool(const std::string& command) {
  ToolRun run{-1, ""};
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return run;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) run.out.append(buffer, n);
  int status = pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    LedgerServerOptions ledger_options;
    ledger_options.data_dir = testing::FreshDir("ledger");
    ledger_options.legacy_mode = true;  // so that direct calls can apply twice
    ledger_ = std::move(*LedgerServer::Start(ledger_options, RealClock::Get()));
    SidecarServerOptions sidecar_options;
    sidecar_options.data_dir = testing::FreshDir("sidecar");
    sidecar_options.upstream_address = Address(ledger_->port());
    sidecar_ = std::move(*SidecarServer::Start(sidecar_options, RealClock::Get()));
    AgentServerOptions agent_options;
    agent_options.data_dir = testing::FreshDir("agent");
    agent_options.tenant = "acme";
    agent_options.default_sidecar = Address(sidecar_->port());
    agent_options.idle_pump_ms = 5;
    agent_ = std::move(*AgentServer::Start(agent_options, RealClock::Get(), RealRandom::Get()));
  }

  static std::string Address(int port) { return "127.0.0.1:" + std::to_string(port); }

  std::unique_ptr<LedgerServer> ledger_;
  std::unique_ptr<SidecarServer> sidecar_;
  std::unique_ptr<AgentServer> agent_;
};

TEST_F(CliTest, OperatorToolsReportWhatHappened) {
  ledger::v1::OpenAccountRequest open;
  open.set_id("alice");
  open.set_initial_balance(10);
  v1::Command c;
  c.set_command_id("open-alice");
  c.set_target_method("/eonce.ledger.v1.Ledger/OpenAccount");
  c.set_request(open.SerializeAsString());
  c.mutable_entity()->set_type("account");
  c.mutable_entity()->set_id("alice");
  ASSERT_TRUE(agent_->outbox().Enqueue(c).ok());
  agent_->Kick();
  auto agent_stub = v1::Agent::NewStub(
      grpc::CreateChannel(Address(agent_->port()), grpc::InsecureChannelCredentials()));
  auto acked = testing::WaitUntilFinal(*agent_stub, "open-alice");
  ASSERT_TRUE(acked.ok()) << acked.status();
  ASSERT_EQ(acked->state(), v1::ACKED);

  std::string sidecar =
      " --sidecar=" + Address(sidecar_->port()) + " --tenant=acme --operator_name=oncall ";
  ToolRun not_operator = Tool("dedupe_sidecar/sidecarctl --sidecar=" + Address(sidecar_->port()) +
                              " --tenant=acme verify");
  EXPECT_NE(not_operator.exit_code, 0) << not_operator.out;
  EXPECT_NE(not_operator.out.find("operator"), std::string::npos) << not_operator.out;
  ToolRun verify = Tool("dedupe_sidecar/sidecarctl" + sidecar + "verify");
  EXPECT_EQ(verify.exit_code, 0) << verify.out;
  EXPECT_NE(verify.out.find("intact: 1 events"), std::string::npos) << verify.out;
  ToolRun audit = Tool("dedupe_sidecar/sidecarctl" + sidecar + "audit --command_id=open-alice");
  EXPECT_NE(audit.out.find("committed OK command_id=open-alice"), std::string::npos) << audit.out;
  ToolRun reconcile = Tool("dedupe_sidecar/sidecarctl" + sidecar + "reconcile --command_id=open-alice");
  EXPECT_NE(reconcile.out.find("RECORD_COMMITTED"), std::string::npos) << reconcile.out;
  // This sidecar is not sharded: it holds no slot map, and says so.
  ToolRun slots = Tool("dedupe_sidecar/sidecarctl" + sidecar + "slots");
  EXPECT_NE(slots.exit_code, 0) << slots.out;
  EXPECT_NE(slots.out.find("not sharded"), std::string::npos) << slots.out;
  ToolRun other_tenant = Tool("dedupe_sidecar/sidecarctl --sidecar=" + Address(sidecar_->port()) +
                          " --tenant=globex reconcile --command_id=open-alice");
  EXPECT_NE(other_tenant.out.find("RECORD_NOT_SEEN"), std::string::npos) << other_tenant.out;
  // The business's effects of the tenant, read through SidecarAdmin by an operator only.
  ToolRun tenant_effects = Tool("dedupe_sidecar/sidecarctl" + sidecar + "effects");
  EXPECT_EQ(tenant_effects.exit_code, 0) << tenant_effects.out;
  EXPECT_NE(tenant_effects.out.find(" open-alice account/alice "), std::string::npos)
      << tenant_effects.out;
  ToolRun effects_refused = Tool("dedupe_sidecar/sidecarctl --sidecar=" +
                                 Address(sidecar_->port()) + " --tenant=acme effects");
  EXPECT_NE(effects_refused.exit_code, 0) << effects_refused.out;
  EXPECT_NE(effects_refused.out.find("operator"), std::string::npos) << effects_refused.out;

  // An operator tool: a business port admits operators and eonce components only.
  ToolRun anonymous = Tool("services/inbox/effectsctl --service=" + Address(ledger_->port()));
  EXPECT_EQ(anonymous.exit_code, 2) << anonymous.out;
  EXPECT_NE(anonymous.out.find("--operator_name"), std::string::npos) << anonymous.out;
  std::string effects = "services/inbox/effectsctl --operator_name=oncall --service=" +
                        Address(ledger_->port());
  ToolRun counts = Tool(effects + " --counts");
  EXPECT_EQ(counts.exit_code, 0) << counts.out;
  EXPECT_NE(counts.out.find("effects 1 commands 1 duplicated 0"), std::string::npos) << counts.out;

  // A component that calls this legacy service without a sidecar applies the same
  // command twice: effectsctl finds it and fails.
  auto direct = ledger::v1::Ledger::NewStub(
      grpc::CreateChannel(Address(ledger_->port()), grpc::InsecureChannelCredentials()));
  for (int i = 0; i < 2; ++i) {
    grpc::ClientContext context;
    context.AddMetadata(kComponentHeader, "bypass");
    context.AddMetadata(kCommandIdHeader, "bypass");
    ledger::v1::OpenAccountRequest again;
    again.set_id("bob" + std::to_string(i));
    ledger::v1::Account account;
    ASSERT_TRUE(direct->OpenAccount(&context, again, &account).ok());
  }
  // The same command id under two tenants is two commands, not a duplicate.
  for (const char* tenant : {"acme", "globex"}) {
    grpc::ClientContext context;
    context.AddMetadata(kComponentHeader, "bypass");
    context.AddMetadata(kCommandIdHeader, "shared-id");
    context.AddMetadata(kTenantHeader, tenant);
    ledger::v1::OpenAccountRequest open;
    open.set_id(std::string("shared-") + tenant);
    ledger::v1::Account account;
    ASSERT_TRUE(direct->OpenAccount(&context, open, &account).ok());
  }
  ToolRun dup = Tool(effects + " --counts");
  EXPECT_EQ(dup.exit_code, 1) << dup.out;
  EXPECT_NE(dup.out.find("DUPLICATE - bypass 2"), std::string::npos) << dup.out;
  EXPECT_EQ(dup.out.find("shared-id"), std::string::npos) << dup.out;

  std::string agent = "outbox_agent/outboxctl --agent=" + Address(agent_->port());
  ToolRun stats = Tool(agent + " stats");
  EXPECT_EQ(stats.exit_code, 0) << stats.out;
  EXPECT_NE(stats.out.find("ACKED 1"), std::string::npos) << stats.out;
  ToolRun show = Tool(agent + " show open-alice");
  EXPECT_NE(show.out.find("QUEUED -> SENDING"), std::string::npos) << show.out;
  EXPECT_NE(show.out.find("SENDING -> ACKED"), std::string::npos) << show.out;
  ToolRun missing = Tool(agent + " show nope");
  EXPECT_NE(missing.exit_code, 0);
}

}  // namespace
}  // namespace eonce
