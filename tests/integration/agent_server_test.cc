// The agent process's own rules, against a real sidecar: a unix socket, a second agent on
// the same data directory, the retention contract at startup, the credential file, and
// Watch.
#include "outbox_agent/doors/agent_server.h"

#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/base/clock.h"
#include "common/command/command.h"
#include "common/base/random.h"
#include "common/base/status.h"
#include "common/rpc/grpc_status.h"
#include "dedupe_sidecar/upstream/fake_upstream.h"
#include "dedupe_sidecar/doors/sidecar_service.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "outbox_agent/client/client.h"
#include "tests/util/http_get.h"
#include "services/ledger/ledger_service.h"
#include "tests/util/temp_dir.h"

namespace eonce {
namespace {

class AgentServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    LedgerServerOptions ledger_options;
    ledger_options.data_dir = testing::FreshDir("ledger");
    ledger_ = std::move(*LedgerServer::Start(ledger_options, RealClock::Get()));
    SidecarServerOptions sidecar_options;
    sidecar_options.data_dir = testing::FreshDir("sidecar");
    sidecar_options.upstream_address = "127.0.0.1:" + std::to_string(ledger_->port());
    sidecar_options.retention = RetentionOptions{3'600'000, 7'200'000};  // one hour
    sidecar_ = std::move(*SidecarServer::Start(sidecar_options, RealClock::Get()));
  }

  AgentServerOptions Options() {
    AgentServerOptions options;
    options.data_dir = dir_;
    options.tenant = "acme";
    options.default_sidecar = "127.0.0.1:" + std::to_string(sidecar_->port());
    options.idle_pump_ms = 5;
    options.replay.retry.max_age_ms = 1'000'000;
    options.replay.retry.retention_margin_ms = 600'000;
    return options;
  }

  // An agent whose replay loop sleeps longer than any test may take unless something
  // wakes it: what a test sees happen was started by a kick.
  AgentServerOptions SleepyOptions() {
    AgentServerOptions options = Options();
    options.idle_pump_ms = 600'000;
    options.max_idle_wait_ms = 600'000;
    options.probe_every_ms = 600'000;
    return options;
  }

  v1::Command Open(const std::string& id) {
    ledger::v1::OpenAccountRequest open;
    open.set_id(id);
    v1::Command c;
    c.set_command_id("open-" + id);
    c.set_target_method("/eonce.ledger.v1.Ledger/OpenAccount");
    c.set_request(open.SerializeAsString());
    c.mutable_entity()->set_type("account");
    c.mutable_entity()->set_id(id);
    return c;
  }

  std::string dir_ = testing::FreshDir("agent");
  std::unique_ptr<LedgerServer> ledger_;
  std::unique_ptr<SidecarServer> sidecar_;
};

// An attempt the sidecar never answers is cancelled at shutdown, not waited for: the
// store closes, and the same data directory opens again in this process. The agent runs
// on a manual clock, so no wait of its own can outlast the call's real deadline.
TEST_F(AgentServerTest, ShutdownCancelsAnAttemptStillInFlightAndClosesTheStore) {
  FakeUpstream business;
  business.set_hold(true);
  SidecarServerOptions holding;
  holding.data_dir = testing::FreshDir("holding-sidecar");
  holding.upstream = &business;
  holding.retention = RetentionOptions{3'600'000, 7'200'000};
  holding.deduper.forward_timeout_ms = 120'000;
  holding.deduper.lease_ms = 130'000;
  auto sidecar = SidecarServer::Start(holding, RealClock::Get());
  ASSERT_TRUE(sidecar.ok()) << sidecar.status();

  ManualClock clock;
  AgentServerOptions options = Options();
  options.default_sidecar = "127.0.0.1:" + std::to_string((*sidecar)->port());
  options.replay.submit_timeout_ms = 60'000;
  options.replay.claim_ttl_ms = 130'000;
  auto agent = AgentServer::Start(options, clock, RealRandom::Get());
  ASSERT_TRUE(agent.ok()) << agent.status();
  auto client = AgentClient::Connect("127.0.0.1:" + std::to_string((*agent)->port()));
  ASSERT_TRUE(client->Enqueue(Open("held")).ok());
  (*agent)->Kick();
  ASSERT_EQ(business.WaitUntilHeld(1, absl::Seconds(20)), 1u);  // the attempt is in flight

  ASSERT_TRUE((*agent)->Shutdown(100).ok());
  agent->reset();
  auto again = AgentServer::Start(Options(), RealClock::Get(), RealRandom::Get());
  ASSERT_TRUE(again.ok()) << again.status();  // the store was closed, its lock released
  auto record = (*again)->store().Get("open-held");
  ASSERT_TRUE(record.ok() && record->has_value());
  EXPECT_FALSE(IsFinal((*record)->state()));  // kept, to be reconciled and sent again
  ASSERT_TRUE((*again)->Shutdown(1000).ok());
  business.Release(ForwardReply());
  ASSERT_TRUE((*sidecar)->Shutdown(1000).ok());
}

TEST_F(AgentServerTest, ServesOnAUnixSocketAndRefusesASecondAgentOnTheSameData) {
  AgentServerOptions options = Options();
  std::string socket = testing::SocketDir() + "/agent.sock";
  options.listen_address = "unix:" + socket;
  auto agent = AgentServer::Start(options, RealClock::Get(), RealRandom::Get());
  ASSERT_TRUE(agent.ok()) << agent.status();
  auto client = AgentClient::Connect("unix:" + socket);
  auto enqueued = client->Enqueue(Open("alice"));
  ASSERT_TRUE(enqueued.ok()) << enqueued.status();
  EXPECT_TRUE(enqueued->created());
  // The payload is not sent back; the stored record keeps it.
  EXPECT_EQ(enqueued->record().command().command_id(), "open-alice");
  EXPECT_TRUE(enqueued->record().command().request().empty());
  auto stored = client->Get("open-alice");
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(stored->command().request(), Open("alice").request());

  AgentServerOptions second = Options();
  auto refused = AgentServer::Start(second, RealClock::Get(), RealRandom::Get());
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("in use by another process"), std::string::npos);
}

TEST_F(AgentServerTest, RefusesAMaxAgeThatIsNotShorterThanTheRetention) {
  AgentServerOptions options = Options();
  options.replay.retry.max_age_ms = 3'000'000;  // retention 3.6M - margin 0.6M = 3.0M
  auto refused = AgentServer::Start(options, RealClock::Get(), RealRandom::Get());
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("max_age_ms"), std::string::npos);
  options.replay.retry.max_age_ms = 2'999'999;
  EXPECT_TRUE(AgentServer::Start(options, RealClock::Get(), RealRandom::Get()).ok());
}

TEST_F(AgentServerTest, CredentialFileRevokesAndRenews) {
  AgentServerOptions options = Options();
  options.credential_file = testing::FreshDir("cred") + "/credential";
  std::ofstream(options.credential_file) << "epoch=3\nrevoked=false\n";
  auto agent = AgentServer::Start(options, RealClock::Get(), RealRandom::Get());
  ASSERT_TRUE(agent.ok()) << agent.status();
  CredentialState& credential = (*agent)->credential();
  EXPECT_EQ(credential.session().epoch, 3);
  EXPECT_TRUE(credential.active());

  // The agent rereads the file when its modification time changes: each write below
  // moves it a second on, instead of waiting for the clock to.
  auto rewrite = [&](const std::string& text) {
    namespace fs = std::filesystem;
    const fs::file_time_type before = fs::last_write_time(options.credential_file);
    std::ofstream(options.credential_file) << text;
    fs::last_write_time(options.credential_file, before + std::chrono::seconds(1));
  };
  rewrite("epoch=3\nrevoked=true\n");
  ASSERT_TRUE(credential.MaybeReloadFile(options.credential_file).ok());
  EXPECT_FALSE(credential.active());
  // Revoked: nothing is sent, the command waits durably, not marked as maybe sent.
  auto bob = (*agent)->outbox().Enqueue(Open("bob"));
  ASSERT_TRUE(bob.ok()) << bob.status();
  EXPECT_FALSE(bob->record().ever_sent());
  EXPECT_EQ((*agent)->replayer().Pump(), 0);
  EXPECT_EQ((*(*agent)->store().Get("open-bob"))->state(), v1::QUEUED);

  rewrite("epoch=4\n");
  ASSERT_TRUE(credential.MaybeReloadFile(options.credential_file).ok());
  EXPECT_TRUE(credential.active());
  EXPECT_EQ(credential.session().epoch, 4);
  rewrite("epoch=2\n");  // backwards: refused
  EXPECT_FALSE(credential.MaybeReloadFile(options.credential_file).ok());
  EXPECT_EQ(credential.session().epoch, 4);
}

// A lane head enqueued while the agent sends goes out at once, so its record carries the
// mark that it may have been sent from its Enqueue's own synced write on (the claim that
// sends it then needs no sync).
TEST_F(AgentServerTest, AnEnqueueWhileTheAgentSendsIsMarkedMaybeSentInItsOwnWrite) {
  auto agent = AgentServer::Start(Options(), RealClock::Get(), RealRandom::Get());
  ASSERT_TRUE(agent.ok()) << agent.status();
  auto client = AgentClient::Connect("127.0.0.1:" + std::to_string((*agent)->port()));
  auto ivan = client->Enqueue(Open("ivan"));
  ASSERT_TRUE(ivan.ok()) << ivan.status();
  EXPECT_TRUE(ivan->record().ever_sent());
  EXPECT_EQ(ivan->record().history_size(), 1);  // the mark is no step of its own
}

// A backlog drains at the pace of the answers: each attempt's end wakes the loop, whose
// idle timer here is longer than the test may take. Three commands of one entity go out
// one after the other, and only the first is started by a kick from outside.
TEST_F(AgentServerTest, AnAttemptsEndStartsTheNextWithoutWaitingForTheIdleTimer) {
  AgentServerOptions options = SleepyOptions();
  auto agent = AgentServer::Start(options, RealClock::Get(), RealRandom::Get());
  ASSERT_TRUE(agent.ok()) << agent.status();
  // Revoked while they are enqueued, so that their own kicks start nothing.
  ASSERT_TRUE((*agent)->credential().Set(1, true).ok());
  const std::vector<std::string> ids = {"erin", "frank", "grace"};
  for (const std::string& id : ids) {
    v1::Command c = Open(id);
    c.mutable_entity()->set_id("one-lane");
    ASSERT_TRUE((*agent)->outbox().Enqueue(c).ok());
  }
  ASSERT_TRUE((*agent)->credential().Set(2, false).ok());
  (*agent)->Kick();
  int acked = 0;
  for (int i = 0; i < 2000 && acked < 3; ++i) {  // at most 20 s
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    acked = 0;
    for (const std::string& id : ids) {
      auto r = (*agent)->store().Get("open-" + id);
      if (r.ok() && r->has_value() && (*r)->state() == v1::ACKED) ++acked;
    }
  }
  EXPECT_EQ(acked, 3);
  EXPECT_EQ((*agent)->replayer().stats().attempts.load(), 3);
}

// An idle agent with an empty outbox sleeps as long as it is let (here longer than the test
// may take), and the Enqueue of a producer wakes it at once: the command is sent without
// waiting for any timer.
TEST_F(AgentServerTest, AnEnqueueWakesAnIdleAgentThatSleepsUntilItsNextDueTime) {
  AgentServerOptions options = SleepyOptions();
  auto agent = AgentServer::Start(options, RealClock::Get(), RealRandom::Get());
  ASSERT_TRUE(agent.ok()) << agent.status();
  EXPECT_EQ((*agent)->store().NextDueMs(), std::nullopt) << "nothing due: the longest sleep";
  auto client = AgentClient::Connect("127.0.0.1:" + std::to_string((*agent)->port()));
  ASSERT_TRUE(client->Enqueue(Open("heidi")).ok());
  bool acked = false;
  for (int i = 0; i < 2000 && !acked; ++i) {  // at most 20 s
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    auto r = (*agent)->store().Get("open-heidi");
    acked = r.ok() && r->has_value() && (*r)->state() == v1::ACKED;
  }
  EXPECT_TRUE(acked);
  EXPECT_EQ((*agent)->replayer().stats().attempts.load(), 1);
}

// A kick that could start nothing does not wake the loop: none while the credential is
// revoked, and none while the only attempt slot is taken. What ends that state kicks
// instead (the new credential, each attempt's end), so nothing waits for the loop's idle
// timer, which here is longer than the test may take.
TEST_F(AgentServerTest, KicksThatCouldStartNothingAreSkippedAndNothingWaitsForTheIdleTimer) {
  AgentServerOptions options = SleepyOptions();
  options.replay.max_in_flight = 1;
  options.replay.max_round = 1;
  auto agent = AgentServer::Start(options, RealClock::Get(), RealRandom::Get());
  ASSERT_TRUE(agent.ok()) << agent.status();
  const std::string address = "127.0.0.1:" + std::to_string((*agent)->port());
  auto client = AgentClient::Connect(address);
  ASSERT_TRUE((*agent)->credential().Set(1, true).ok());

  std::vector<std::string> ids;
  const int64_t sent_before = (*agent)->kicks_sent();
  for (int i = 0; i < 5; ++i) {
    ids.push_back(absl::StrCat("revoked-", i));
    ASSERT_TRUE(client->Enqueue(Open(ids.back())).ok());
  }
  EXPECT_EQ((*agent)->kicks_sent(), sent_before);
  EXPECT_GE((*agent)->kicks_skipped(), 5);

  // The renewal kicks; then one attempt at a time, each started by the end of the one
  // before, while more commands arrive and find the slot taken.
  auto stub = v1::Agent::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.AddMetadata(kOperatorHeader, "oncall");  // an operator's call
  v1::SetCredentialRequest renew;
  renew.set_epoch(2);
  v1::SetCredentialResponse renewed;
  ASSERT_TRUE(stub->SetCredential(&context, renew, &renewed).ok());
  for (int i = 0; i < 10; ++i) {
    ids.push_back(absl::StrCat("busy-", i));
    ASSERT_TRUE(client->Enqueue(Open(ids.back())).ok());
  }
  size_t acked = 0;
  for (int i = 0; i < 2000 && acked < ids.size(); ++i) {  // at most 20 s
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    acked = 0;
    for (const std::string& id : ids) {
      auto r = (*agent)->store().Get("open-" + id);
      if (r.ok() && r->has_value() && (*r)->state() == v1::ACKED) ++acked;
    }
  }
  EXPECT_EQ(acked, ids.size());
  EXPECT_EQ((*agent)->replayer().stats().attempts.load(), static_cast<int64_t>(ids.size()));
}

// An operator's Drop of the record that holds its entity's lane wakes the loop: the
// entity's next command goes at once, not after the loop's idle timer, which here is
// longer than the test may take.
TEST_F(AgentServerTest, AnOperatorsDropLetsTheEntitysNextCommandGoAtOnce) {
  AgentServerOptions options = SleepyOptions();
  auto agent = AgentServer::Start(options, RealClock::Get(), RealRandom::Get());
  ASSERT_TRUE(agent.ok()) << agent.status();
  const std::string address = "127.0.0.1:" + std::to_string((*agent)->port());
  auto client = AgentClient::Connect(address);
  // Revoked while the two commands arrive (their kicks are skipped); the first is then
  // dead-lettered, and the credential renewed without a kick.
  ASSERT_TRUE((*agent)->credential().Set(1, true).ok());
  v1::Command next = Open("kim-next");
  next.mutable_entity()->set_id("kim");
  ASSERT_TRUE(client->Enqueue(Open("kim")).ok());
  ASSERT_TRUE(client->Enqueue(next).ok());
  ASSERT_TRUE((*agent)->store().Mutate("open-kim", "dead-lettered for the test",
                                       [](OutboxRecord* r) {
                                         r->set_state(v1::DEAD_LETTERED);
                                         return absl::OkStatus();
                                       }, /*sync=*/true).ok());
  ASSERT_TRUE((*agent)->credential().Set(2, false).ok());
  auto state_of_next = [&] {
    auto r = (*agent)->store().Get("open-kim-next");
    return r.ok() && r->has_value() ? (*r)->state() : v1::OUTBOX_STATE_UNSPECIFIED;
  };
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ASSERT_EQ(state_of_next(), v1::QUEUED) << "held behind the dead letter";

  auto stub = v1::Agent::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.AddMetadata(kOperatorHeader, "oncall");  // an operator's call
  v1::DropRequest drop;
  drop.set_command_id("open-kim");
  drop.set_why("applied by hand");
  OutboxRecord dropped;
  ASSERT_TRUE(stub->Drop(&context, drop, &dropped).ok());
  bool acked = false;
  for (int i = 0; i < 2000 && !acked; ++i) {  // at most 20 s
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    acked = state_of_next() == v1::ACKED;
  }
  EXPECT_TRUE(acked);
}

TEST_F(AgentServerTest, MetricsEndpointPassesPromtool) {
  AgentServerOptions options = Options();
  options.metrics_address = "127.0.0.1:0";
  auto agent = AgentServer::Start(options, RealClock::Get(), RealRandom::Get());
  ASSERT_TRUE(agent.ok()) << agent.status();
  ASSERT_TRUE((*agent)->outbox().Enqueue(Open("dave")).ok());
  (*agent)->Kick();
  for (int i = 0; i < 300; ++i) {
    auto r = (*agent)->store().Get("open-dave");
    if (r.ok() && r->has_value() && (*r)->state() == v1::ACKED) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::string text = testing::HttpGet((*agent)->metrics_port(), "/metrics");
  EXPECT_NE(text.find("eonce_agent_outbox_records{state=\"acked\"} 1"), std::string::npos) << text;
  EXPECT_NE(text.find("eonce_agent_acked_total 1"), std::string::npos) << text;
  EXPECT_NE(text.find("eonce_agent_replay_active 1"), std::string::npos) << text;
  std::string output;
  int promtool = testing::PromtoolCheck(text, &output);
  if (promtool == -1) GTEST_SKIP() << "promtool is not installed (tools/setup.sh installs it)";
  EXPECT_EQ(promtool, 0) << output;
}

TEST_F(AgentServerTest, WatchStreamsStateChanges) {
  auto agent = AgentServer::Start(Options(), RealClock::Get(), RealRandom::Get());
  ASSERT_TRUE(agent.ok()) << agent.status();
  auto client = AgentClient::Connect("127.0.0.1:" + std::to_string((*agent)->port()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  auto stream = client->stub().Watch(&context, v1::WatchRequest());
  // The headers arrive once the subscription is in place.
  stream->WaitForInitialMetadata();
  ASSERT_TRUE(client->Enqueue(Open("carol")).ok());
  std::vector<v1::OutboxState> seen;
  v1::WatchEvent event;
  while (stream->Read(&event)) {
    if (event.command_id() != "open-carol") continue;
    seen.push_back(event.state());
    if (event.state() == v1::ACKED) break;
  }
  context.TryCancel();
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.front(), v1::QUEUED);
  EXPECT_EQ(seen.back(), v1::ACKED);
}

// A Watch that names states hears of those alone, over the real stream: the first notice
// of a command it sees is its ACKED, not the steps before. A state no agent knows is
// refused before anything is subscribed.
TEST_F(AgentServerTest, AWatchThatNamesStatesHearsOfThoseAlone) {
  auto agent = AgentServer::Start(Options(), RealClock::Get(), RealRandom::Get());
  ASSERT_TRUE(agent.ok()) << agent.status();
  auto client = AgentClient::Connect("127.0.0.1:" + std::to_string((*agent)->port()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::WatchRequest acked_only;
  acked_only.add_states(v1::ACKED);
  auto stream = client->stub().Watch(&context, acked_only);
  stream->WaitForInitialMetadata();
  ASSERT_TRUE(client->Enqueue(Open("erin")).ok());
  v1::WatchEvent event;
  ASSERT_TRUE(stream->Read(&event));
  EXPECT_EQ(event.command_id(), "open-erin");
  EXPECT_EQ(event.state(), v1::ACKED);
  context.TryCancel();

  // The reason a Watch of `states` is refused with, or "" when it is served.
  auto refusal = [&](const std::vector<int>& states) -> std::string {
    grpc::ClientContext watch_context;
    watch_context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    v1::WatchRequest request;
    for (int state : states) request.add_states(static_cast<v1::OutboxState>(state));
    auto watch = client->stub().Watch(&watch_context, request);
    v1::WatchEvent unused;
    if (watch->Read(&unused)) return "";  // a notice: served
    grpc::Status status = watch->Finish();
    if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) return "";  // served
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
    return ReasonOf(FromGrpcStatus(status, &watch_context));
  };
  EXPECT_EQ(refusal({0}), "UNKNOWN_STATE");
  EXPECT_EQ(refusal({99}), "UNKNOWN_STATE");
  EXPECT_EQ(refusal({-1}), "UNKNOWN_STATE");
  EXPECT_EQ(refusal({v1::ACKED, 99}), "UNKNOWN_STATE");
  EXPECT_EQ(refusal(std::vector<int>(17, v1::ACKED)), "TOO_MANY_STATES");
  EXPECT_EQ(refusal(std::vector<int>(16, v1::ACKED)), "") << "16 states are allowed";
}

// A watcher that goes away while a write to it is in flight still ends its stream on the
// server: otherwise OnDone never comes and Shutdown waits for it forever (this test then
// runs into its timeout). Each round enqueues while 8 watchers read, cancels them amid the
// events, and shuts the agent down; the old mistake hung about one round in sixteen.
TEST_F(AgentServerTest, ShutdownEndsWatchersThatWentAwayMidWrite) {
  AgentServerOptions options = Options();
  options.default_sidecar = "127.0.0.1:1";  // nothing is sent: one event per Enqueue
  options.startup_info_wait_ms = 0;
  for (int round = 0; round < 20; ++round) {
    auto agent = AgentServer::Start(options, RealClock::Get(), RealRandom::Get());
    ASSERT_TRUE(agent.ok()) << agent.status();
    auto client = AgentClient::Connect("127.0.0.1:" + std::to_string((*agent)->port()));
    constexpr int kWatchers = 8;
    std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
    std::vector<std::thread> readers;
    for (int w = 0; w < kWatchers; ++w) {
      contexts.push_back(std::make_unique<grpc::ClientContext>());
      contexts.back()->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
      auto* context = contexts.back().get();
      auto stream = client->stub().Watch(context, v1::WatchRequest());
      stream->WaitForInitialMetadata();
      readers.emplace_back([stream = std::move(stream), w]() mutable {
        v1::WatchEvent event;
        // Readers stop at different points, so some streams have writes in flight.
        for (int read = 0; read < 4 * w && stream->Read(&event); ++read) {
        }
      });
    }
    for (int i = 0; i < 40; ++i) {
      ASSERT_TRUE(client->Enqueue(Open(absl::StrCat("w", round, "-", i))).ok());
      if (i == 20) {
        for (auto& context : contexts) context->TryCancel();
      }
    }
    for (auto& reader : readers) reader.join();
    ASSERT_TRUE((*agent)->Shutdown(0).ok());
  }
}

// Records carry their requests: a page stops at about 1 MiB and says where the next
// starts, so listing never runs into a message size limit.
TEST_F(AgentServerTest, ListPagesStayUnderTheMessageLimitAndCoverEveryRecord) {
  AgentServerOptions options = Options();
  options.default_sidecar = "127.0.0.1:1";  // nothing is sent: the records stay as they are
  options.startup_info_wait_ms = 0;
  auto agent = AgentServer::Start(options, RealClock::Get(), RealRandom::Get());
  ASSERT_TRUE(agent.ok()) << agent.status();
  auto client = AgentClient::Connect("127.0.0.1:" + std::to_string((*agent)->port()));
  for (int i = 0; i < 12; ++i) {
    v1::Command c = Open(absl::StrCat("big", i));
    c.set_request(c.request() + std::string(300 * 1024, '\x01'));  // an unknown field's bytes
    ASSERT_TRUE(client->Enqueue(c).ok());
  }
  std::set<std::string> seen;
  std::string after;
  int pages = 0;
  do {
    grpc::ClientContext context;
    v1::ListRequest request;
    request.set_limit(1000);
    request.set_after_command_id(after);
    v1::ListResponse response;
    grpc::Status s = client->stub().List(&context, request, &response);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_LE(response.ByteSizeLong(), size_t{1} << 21);
    for (const auto& r : response.records()) seen.insert(r.command().command_id());
    after = response.next_after_command_id();
    ++pages;
  } while (!after.empty() && pages < 100);
  EXPECT_EQ(seen.size(), 12u);
  EXPECT_GE(pages, 3);
}

}  // namespace
}  // namespace eonce
