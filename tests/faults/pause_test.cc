// SIGSTOP the sidecar for longer than the agents' deadline while two agents send the
// same commands: their attempts pile up in the stopped sidecar's sockets, and on SIGCONT
// all of them arrive at once, each looking fresh. The business service runs without an
// inbox (legacy mode), so a second forward of any command would be a second effect:
// exactly one forward per command must happen.
#include <signal.h>

#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/rpc/tls.h"
#include "eonce/ledger/v1/ledger.grpc.pb.h"
#include "eonce/v1/agent.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/faults/stack.h"
#include "tests/util/temp_dir.h"

namespace eonce::testing {
namespace {

v1::Command Transfer(int i) {
  ledger::v1::TransferRequest t;
  t.set_from(i % 2 ? "a" : "b");
  t.set_to(i % 2 ? "b" : "a");
  t.set_amount(1 + i);
  v1::Command c;
  c.set_command_id(absl::StrCat("pay-", i));
  c.set_target_method("/eonce.ledger.v1.Ledger/Transfer");
  c.set_request(t.SerializeAsString());
  c.mutable_entity()->set_type("transfer");
  c.mutable_entity()->set_id(absl::StrCat(i));
  return c;
}

std::map<std::string, v1::OutboxRecord> Records(const std::string& agent_address) {
  auto agent = v1::Agent::NewStub(NewChannel(agent_address, TlsFiles(), 4 << 20));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::ListRequest request;
  request.set_limit(1000);
  v1::ListResponse response;
  agent->List(&context, request, &response);
  std::map<std::string, v1::OutboxRecord> out;
  for (const auto& r : response.records()) out[r.command().command_id()] = r;
  return out;
}

TEST(PauseTest, ASidecarStoppedPastTheDeadlineForwardsEachCommandOnce) {
  StackOptions options;
  options.legacy_ledger = true;
  options.agents = 2;
  options.agent_args = {"--submit_timeout_ms=500", "--max_backoff_ms=100"};
  auto stack = FaultStack::Start(FreshDir("pause"), options);
  ASSERT_TRUE(stack.ok()) << stack.status();
  FaultStack& s = **stack;

  // Two accounts, opened while everything runs.
  {
    auto agent = v1::Agent::NewStub(NewChannel(s.agent_address(0), TlsFiles(), 4 << 20));
    for (const char* id : {"a", "b"}) {
      ledger::v1::OpenAccountRequest open;
      open.set_id(id);
      open.set_initial_balance(10'000);
      v1::EnqueueRequest request;
      request.mutable_command()->set_command_id(absl::StrCat("open-", id));
      request.mutable_command()->set_target_method("/eonce.ledger.v1.Ledger/OpenAccount");
      request.mutable_command()->set_request(open.SerializeAsString());
      request.mutable_command()->mutable_entity()->set_type("account");
      request.mutable_command()->mutable_entity()->set_id(id);
      grpc::ClientContext context;
      v1::EnqueueResponse response;
      ASSERT_TRUE(agent->Enqueue(&context, request, &response).ok());
    }
  }
  Verdict opened =
      WaitAndCheck(s.process(Component::kAgent, 0).address(),
                   s.process(Component::kLedger).address(), {"open-a", "open-b"}, 20'000);
  ASSERT_EQ(opened.applied, 2) << opened.ToString();

  constexpr int kCommands = 20;
  s.process(Component::kSidecar).Signal(SIGSTOP, /*wait=*/false);
  for (int agent = 0; agent < 2; ++agent) {
    auto stub = v1::Agent::NewStub(NewChannel(s.agent_address(agent), TlsFiles(), 4 << 20));
    for (int i = 0; i < kCommands; ++i) {
      v1::EnqueueRequest request;
      *request.mutable_command() = Transfer(i);
      grpc::ClientContext context;
      v1::EnqueueResponse response;
      ASSERT_TRUE(stub->Enqueue(&context, request, &response).ok());
    }
  }
  // Six deadlines long.
  std::this_thread::sleep_for(std::chrono::seconds(3));
  s.process(Component::kSidecar).Signal(SIGCONT, /*wait=*/false);

  std::set<std::string> ids;
  for (int i = 0; i < kCommands; ++i) ids.insert(Transfer(i).command_id());
  ids.insert("open-a");
  ids.insert("open-b");
  int64_t retried = 0;
  for (int agent = 0; agent < 2; ++agent) {
    std::set<std::string> mine = ids;
    if (agent == 1) {
      mine.erase("open-a");
      mine.erase("open-b");
    }
    Verdict v = WaitAndCheck(s.process(Component::kAgent, agent).address(),
                             s.process(Component::kLedger).address(), mine, 60'000);
    EXPECT_EQ(v.applied, static_cast<int64_t>(mine.size()))
        << "agent " << agent << ": " << v.ToString();
    EXPECT_EQ(v.duplicate_effects, 0) << v.ToString();
    EXPECT_TRUE(v.conserved) << v.ToString();
    for (const auto& [id, record] : Records(s.process(Component::kAgent, agent).address())) {
      if (record.attempt() > 1) retried++;
    }
  }
  // The agents did retry while the sidecar was stopped...
  EXPECT_GT(retried, 0);
  // ...and the ledger, which has no inbox of its own, saw each transfer exactly once.
  std::map<std::string, int> effects = EffectsByCommand(s.process(Component::kLedger).address())
                                           .value_or(std::map<std::string, int>());
  for (int i = 0; i < kCommands; ++i) {
    EXPECT_EQ(effects[Transfer(i).command_id()], 1) << Transfer(i).command_id();
  }
  std::printf("pause run: %d commands from 2 agents, %ld records retried, %zu effects\n", kCommands,
              static_cast<long>(retried), effects.size());
}

}  // namespace
}  // namespace eonce::testing
