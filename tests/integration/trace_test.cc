// W3C trace context end to end: the real agent, sidecar and ledger as processes over
// loopback, a lost answer between agent and sidecar (a fault proxy resets the connection as
// the answer starts) and the retry it causes. One trace id must then show up in the agent's
// history (a distinct span per attempt), the sidecar's audit, the ledger's effect, and
// every process's log lines about the command. Then a malformed traceparent: dropped and
// counted by the agent and the sidecar, and the command still applied once.
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/base/clock.h"
#include "common/command/command.h"
#include "common/base/random.h"
#include "common/command/trace_context.h"
#include "dedupe_sidecar/doors/sidecar_service.h"
#include "eonce/ledger/v1/ledger.grpc.pb.h"
#include "eonce/v1/agent.grpc.pb.h"
#include "eonce/v1/outcome.grpc.pb.h"
#include "eonce/v1/sidecar.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "outbox_agent/doors/agent_server.h"
#include "services/ledger/ledger_service.h"
#include "tests/util/account_command.h"
#include "tests/util/agent_wait.h"
#include "tests/util/fault_proxy.h"
#include "tests/util/http_get.h"
#include "tests/util/process.h"
#include "tests/util/temp_dir.h"

namespace eonce {
namespace {

constexpr char kTraceId[] = "4bf92f3577b34da6a3ce929d0e0e4736";
constexpr char kTraceparent[] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

std::string Address(int port) { return "127.0.0.1:" + std::to_string(port); }

using testing::AccountCommand;

// Enqueue over gRPC, with the trace context in the call's metadata.
grpc::Status Enqueue(v1::Agent::Stub& agent, const v1::Command& command,
                     const std::string& traceparent) {
  grpc::ClientContext context;
  if (!traceparent.empty()) context.AddMetadata(kTraceparentHeader, traceparent);
  context.AddMetadata(kTracestateHeader, "rojo=00f067aa0ba902b7");
  v1::EnqueueRequest request;
  *request.mutable_command() = command;
  v1::EnqueueResponse response;
  return agent.Enqueue(&context, request, &response);
}

std::vector<std::string> LinesWith(const std::string& path, const std::string& needle) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) {
    if (line.find(needle) != std::string::npos) out.push_back(line);
  }
  return out;
}

// The value of the counter line `series` (name and labels) in a Prometheus text page.
double CounterValue(const std::string& page, const std::string& series) {
  std::istringstream in(page);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(series + " ", 0) == 0) return std::stod(line.substr(series.size() + 1));
  }
  return -1;
}

TEST(TraceTest, OneTraceAcrossTheAgentTheSidecarAndTheLedgerThroughALostAnswer) {
  const std::string dir = testing::FreshDir("trace");
  auto ledger = Process::Start("services/ledger/ledger_service",
                               {"--listen=127.0.0.1:0", "--data_dir=" + dir + "/ledger"},
                               dir + "/ledger.log");
  ASSERT_TRUE(ledger.ok()) << ledger.status();
  auto sidecar = Process::Start("dedupe_sidecar/dedupe_sidecar",
                                {"--listen=127.0.0.1:0", "--data_dir=" + dir + "/sidecar",
                                 "--upstream=" + (*ledger)->address()},
                                dir + "/sidecar.log");
  ASSERT_TRUE(sidecar.ok()) << sidecar.status();
  auto proxy = testing::FaultProxy::Start((*sidecar)->address(), 1);
  ASSERT_TRUE(proxy.ok()) << proxy.status();
  auto agent = Process::Start("outbox_agent/outbox_agent",
                              {"--listen=127.0.0.1:0", "--data_dir=" + dir + "/agent",
                               "--tenant=acme", "--sidecar=" + (*proxy)->address(),
                               "--base_backoff_ms=20", "--max_backoff_ms=200"},
                              dir + "/agent.log");
  ASSERT_TRUE(agent.ok()) << agent.status();
  auto stub = v1::Agent::NewStub(
      grpc::CreateChannel((*agent)->address(), grpc::InsecureChannelCredentials()));

  // Accounts first, untraced: the agent then knows the sidecar (its retention) before any
  // answer is lost.
  for (const char* id : {"alice", "bob"}) {
    ledger::v1::OpenAccountRequest open;
    open.set_id(id);
    open.set_initial_balance(100);
    ASSERT_TRUE(Enqueue(*stub,
                        AccountCommand(std::string("open-") + id,
                                       "/eonce.ledger.v1.Ledger/OpenAccount", open, id),
                        "")
                    .ok());
    auto opened = testing::WaitUntilFinal(*stub, std::string("open-") + id, 20'000);
    ASSERT_TRUE(opened.ok()) << opened.status();
    ASSERT_EQ(opened->state(), v1::ACKED);
  }

  // Every answer from the sidecar is lost until the transfer's first attempt has failed.
  grpc::ClientContext watch_context;
  watch_context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  auto watch = stub->Watch(&watch_context, v1::WatchRequest());
  watch->WaitForInitialMetadata();
  (*proxy)->SetLoseResponseRatio(1.0);
  ledger::v1::TransferRequest transfer;
  transfer.set_from("alice");
  transfer.set_to("bob");
  transfer.set_amount(30);
  ASSERT_TRUE(
      Enqueue(*stub, AccountCommand("pay-1", "/eonce.ledger.v1.Ledger/Transfer", transfer, "alice"),
              kTraceparent)
          .ok());
  v1::WatchEvent event;
  bool failed_once = false;
  while (!failed_once && watch->Read(&event)) {
    if (event.command_id() != "pay-1") continue;
    EXPECT_EQ(event.trace_id(), kTraceId);  // Watch names the trace
    failed_once = event.state() == v1::UNKNOWN || event.state() == v1::RETRYABLE_FAILED;
  }
  ASSERT_TRUE(failed_once) << "the first attempt never failed";
  (*proxy)->Heal();
  watch_context.TryCancel();
  EXPECT_GE((*proxy)->responses_lost(), 1);

  auto paid = testing::WaitUntilFinal(*stub, "pay-1", 30'000);
  ASSERT_TRUE(paid.ok()) << paid.status();
  ASSERT_EQ(paid->state(), v1::ACKED);
  ASSERT_GE(paid->attempt(), 2u);

  // The agent's history: the trace, and a distinct span per attempt.
  EXPECT_EQ(TraceIdOf(paid->command().trace()), kTraceId);
  EXPECT_EQ(paid->command().trace().traceparent(), kTraceparent);
  std::vector<std::string> spans;
  for (const v1::Transition& t : paid->history()) {
    if (!t.span_id().empty()) spans.push_back(t.span_id());
  }
  ASSERT_EQ(spans.size(), paid->attempt());
  EXPECT_EQ(std::set<std::string>(spans.begin(), spans.end()).size(), spans.size());
  for (const std::string& span : spans) EXPECT_NE(span, "00f067aa0ba902b7");

  // The sidecar's audit: the first attempt's committed event, and the retry's lookup.
  auto admin = v1::SidecarAdmin::NewStub(
      grpc::CreateChannel((*sidecar)->address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext audit_context;
  audit_context.AddMetadata(kTenantHeader, "acme");
  audit_context.AddMetadata(kOperatorHeader, "oncall");
  v1::QueryAuditRequest audit_request;
  audit_request.set_command_id("pay-1");
  audit_request.set_limit(100);
  v1::QueryAuditResponse audit;
  grpc::Status audited = admin->QueryAudit(&audit_context, audit_request, &audit);
  ASSERT_TRUE(audited.ok()) << audited.error_message();
  std::set<std::string> decisions;
  for (const v1::AuditEvent& e : audit.events()) {
    EXPECT_EQ(e.trace_id(), kTraceId) << e.decision();
    decisions.insert(e.decision());
  }
  EXPECT_TRUE(decisions.count("committed")) << audit.DebugString();

  // The ledger's effect: the trace, under the first attempt's span. Once.
  auto effects = v1::Effects::NewStub(
      grpc::CreateChannel((*ledger)->address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext effects_context;
  effects_context.AddMetadata(kComponentHeader, "checker");
  v1::ListEffectsRequest effects_request;
  effects_request.set_limit(100);
  v1::ListEffectsResponse listed;
  ASSERT_TRUE(effects->ListEffects(&effects_context, effects_request, &listed).ok());
  int applied = 0;
  for (const v1::Effect& e : listed.effects()) {
    if (e.command_id() != "pay-1") {
      EXPECT_EQ(e.trace_id(), "");  // the untraced accounts stay untraced
      continue;
    }
    ++applied;
    EXPECT_EQ(e.trace_id(), kTraceId);
    EXPECT_EQ(e.span_id(), spans[0]);
  }
  EXPECT_EQ(applied, 1);

  // Each process's log lines about the command carry the trace id.
  for (const char* log : {"agent.log", "sidecar.log", "ledger.log"}) {
    std::vector<std::string> lines = LinesWith(dir + "/" + log, "\"trace_id\":\"" +
                                                                    std::string(kTraceId) + "\"");
    EXPECT_FALSE(lines.empty()) << log << " has no line with the trace id";
    for (const std::string& line : lines) {
      EXPECT_NE(line.find("pay-1"), std::string::npos) << log << ": " << line;
    }
  }
  // The agent logged the failed attempt under its span.
  EXPECT_FALSE(LinesWith(dir + "/agent.log", "\"span_id\":\"" + spans[0] + "\"").empty());
}

// In-process servers, for their metrics ports.
TEST(TraceTest, AMalformedTraceparentIsDroppedCountedAndTheCommandAppliedOnce) {
  LedgerServerOptions ledger_options;
  ledger_options.data_dir = testing::FreshDir("ledger");
  auto ledger = LedgerServer::Start(ledger_options, RealClock::Get());
  ASSERT_TRUE(ledger.ok()) << ledger.status();
  SidecarServerOptions sidecar_options;
  sidecar_options.data_dir = testing::FreshDir("sidecar");
  sidecar_options.upstream_address = Address((*ledger)->port());
  sidecar_options.metrics_address = "127.0.0.1:0";
  auto sidecar = SidecarServer::Start(sidecar_options, RealClock::Get());
  ASSERT_TRUE(sidecar.ok()) << sidecar.status();
  AgentServerOptions agent_options;
  agent_options.data_dir = testing::FreshDir("agent");
  agent_options.tenant = "acme";
  agent_options.default_sidecar = Address((*sidecar)->port());
  agent_options.idle_pump_ms = 5;
  agent_options.metrics_address = "127.0.0.1:0";
  auto agent = AgentServer::Start(agent_options, RealClock::Get(), RealRandom::Get());
  ASSERT_TRUE(agent.ok()) << agent.status();
  auto stub = v1::Agent::NewStub(
      grpc::CreateChannel(Address((*agent)->port()), grpc::InsecureChannelCredentials()));

  ledger::v1::OpenAccountRequest open;
  open.set_id("carol");
  open.set_initial_balance(5);
  v1::Command command =
      AccountCommand("open-carol", "/eonce.ledger.v1.Ledger/OpenAccount", open, "carol");
  // Uppercase hex: not a traceparent. Never an error to the caller.
  const std::string malformed = "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01";
  grpc::Status enqueued = Enqueue(*stub, command, malformed);
  ASSERT_TRUE(enqueued.ok()) << enqueued.error_message();
  auto done = testing::WaitUntilFinal(*stub, "open-carol", 20'000);
  ASSERT_TRUE(done.ok()) << done.status();
  ASSERT_EQ(done->state(), v1::ACKED);
  EXPECT_EQ(done->command().trace().ByteSizeLong(), 0u);
  for (const v1::Transition& t : done->history()) EXPECT_EQ(t.span_id(), "");

  // The same command straight at the sidecar, with a malformed traceparent in the
  // metadata and in the field: a duplicate, answered from the record.
  auto direct = v1::Sidecar::NewStub(
      grpc::CreateChannel(Address((*sidecar)->port()), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.AddMetadata(kTenantHeader, "acme");
  context.AddMetadata(kTraceparentHeader, "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  v1::SubmitRequest submit;
  *submit.mutable_command() = done->command();
  submit.mutable_command()->mutable_trace()->set_traceparent("00-zz");
  v1::SubmitResponse replayed;
  grpc::Status submitted = direct->Submit(&context, submit, &replayed);
  ASSERT_TRUE(submitted.ok()) << submitted.error_message();
  EXPECT_EQ(replayed.disposition(), v1::REPLAYED);

  std::string agent_metrics = testing::HttpGet((*agent)->metrics_port(), "/metrics");
  EXPECT_EQ(CounterValue(agent_metrics,
                         "eonce_agent_trace_context_dropped_total{header=\"traceparent\"}"),
            1)
      << agent_metrics;
  std::string sidecar_metrics = testing::HttpGet((*sidecar)->metrics_port(), "/metrics");
  EXPECT_EQ(CounterValue(sidecar_metrics,
                         "eonce_sidecar_trace_context_dropped_total{header=\"traceparent\"}"),
            2)  // the metadata's and the field's
      << sidecar_metrics;

  auto effects = v1::Effects::NewStub(
      grpc::CreateChannel(Address((*ledger)->port()), grpc::InsecureChannelCredentials()));
  grpc::ClientContext effects_context;
  effects_context.AddMetadata(kComponentHeader, "checker");
  v1::ListEffectsRequest effects_request;
  effects_request.set_limit(100);
  v1::ListEffectsResponse listed;
  ASSERT_TRUE(effects->ListEffects(&effects_context, effects_request, &listed).ok());
  ASSERT_EQ(listed.effects_size(), 1);
  EXPECT_EQ(listed.effects(0).command_id(), "open-carol");
  EXPECT_EQ(listed.effects(0).trace_id(), "");
}

// The command's own field wins over the call's metadata; the metadata applies to every
// command of a batch without one.
TEST(TraceTest, TheFieldWinsOverTheMetadataAndABatchsMetadataFillsTheRest) {
  AgentServerOptions options;
  options.data_dir = testing::FreshDir("agent");
  options.tenant = "acme";
  options.default_sidecar = "127.0.0.1:1";  // nothing is sent: only what is stored matters
  auto agent = AgentServer::Start(options, RealClock::Get(), RealRandom::Get());
  ASSERT_TRUE(agent.ok()) << agent.status();
  auto stub = v1::Agent::NewStub(
      grpc::CreateChannel(Address((*agent)->port()), grpc::InsecureChannelCredentials()));
  const std::string field = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
  ledger::v1::OpenAccountRequest open;
  open.set_id("dave");

  v1::Command both = AccountCommand("both", "/eonce.ledger.v1.Ledger/OpenAccount", open, "dave");
  both.mutable_trace()->set_traceparent(field);
  ASSERT_TRUE(Enqueue(*stub, both, kTraceparent).ok());

  grpc::ClientContext context;
  context.AddMetadata(kTraceparentHeader, kTraceparent);
  v1::EnqueueBatchRequest batch;
  *batch.add_commands() =
      AccountCommand("from-metadata", "/eonce.ledger.v1.Ledger/OpenAccount", open, "erin");
  v1::Command own = AccountCommand("own-field", "/eonce.ledger.v1.Ledger/OpenAccount", open, "fay");
  own.mutable_trace()->set_traceparent(field);
  *batch.add_commands() = own;
  v1::EnqueueBatchResponse answered;
  ASSERT_TRUE(stub->EnqueueBatch(&context, batch, &answered).ok());

  for (const auto& [id, want] : std::vector<std::pair<std::string, std::string>>{
           {"both", field}, {"from-metadata", kTraceparent}, {"own-field", field}}) {
    grpc::ClientContext get_context;
    v1::GetRequest get;
    get.set_command_id(id);
    v1::OutboxRecord record;
    ASSERT_TRUE(stub->Get(&get_context, get, &record).ok()) << id;
    EXPECT_EQ(record.command().trace().traceparent(), want) << id;
  }
}

}  // namespace
}  // namespace eonce
