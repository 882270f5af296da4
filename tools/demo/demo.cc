// The eonce demo: the whole promise on one machine.
//
// It starts, on loopback with data in a fresh folder: the ledger (inbox mode) behind its
// sidecar, a legacy (non-idempotent) ledger behind another sidecar, and an agent. Acting
// as the producer, it sends thousands of commands with duplicate submissions, kills the
// sidecar and restarts it mid-run, loses business answers after the effect, reuses a key
// with another payload, revokes and renews the agent's credential, provokes business
// rejections, and leaves an unknown outcome of the legacy service parked for an operator.
// Then it checks, from the services' effect ledgers, that nothing was lost, nothing
// applied twice and the money is conserved, and prints one machine-readable summary line.
// It exits non-zero if any invariant broke.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/command.h"
#include "common/flags.h"
#include "common/grpc_status.h"
#include "common/status.h"
#include "eonce/case/v1/case.grpc.pb.h"
#include "eonce/ledger/v1/ledger.grpc.pb.h"
#include "eonce/v1/agent.grpc.pb.h"
#include "eonce/v1/outcome.grpc.pb.h"
#include "eonce/v1/sidecar.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "outbox_agent/client.h"
#include "outbox_agent/states.h"
#include "tests/util/ground_truth.h"
#include "tools/demo/demo_stack.h"
#include "tools/demo/report.h"
#include "tests/util/process.h"

ABSL_FLAG(std::string, bin_dir, "bazel-bin", "where the built binaries are");
ABSL_FLAG(int32_t, commands, 2000, "transfers to send through the agent");
ABSL_FLAG(int32_t, accounts, 40, "ledger accounts");
ABSL_FLAG(bool, faults, true, "kill the sidecar, lose answers, revoke the credential");
ABSL_FLAG(bool, keep, false, "keep the data folder (its path is printed)");
ABSL_FLAG(bool, quiet, false, "no progress bar and no report, only the summary line");
ABSL_FLAG(uint64_t, seed, 42, "the workload's seed");
ABSL_FLAG(int32_t, timeout_s, 180, "give up waiting for the outcome after this long");

namespace eonce {
namespace {

namespace fs = std::filesystem;
using ledger::v1::Ledger;
using v1::Agent;

bool quiet = false;

void Say(const std::string& text) {
  if (!quiet) std::printf("%s\n", text.c_str());
  std::fflush(stdout);
}

std::unique_ptr<grpc::ClientContext> Context(int64_t timeout_ms = 5000) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::milliseconds(timeout_ms));
  return context;
}


std::string Bar(const std::map<std::string, int64_t>& counts, int64_t final_count, int64_t total) {
  int width = 30;
  int filled = total == 0 ? width : static_cast<int>(width * final_count / total);
  std::string bar = "[" + std::string(filled, '#') + std::string(width - filled, '.') + "]";
  std::string text = absl::StrFormat("%s %5d/%d", bar, final_count, total);
  for (const auto& [state, n] : counts) {
    if (n > 0) absl::StrAppend(&text, " ", state, "=", n);
  }
  return text;
}

std::map<std::string, int64_t> Counts(Agent::Stub& agent) {
  std::map<std::string, int64_t> counts;
  v1::StatsResponse stats;
  auto context = Context();
  if (agent.Stats(context.get(), v1::StatsRequest(), &stats).ok()) {
    for (const auto& c : stats.counts()) {
      std::string name = v1::OutboxState_Name(c.state());
      for (auto& ch : name) ch = static_cast<char>(std::tolower(ch));
      counts[name] = c.count();
    }
  }
  return counts;
}

// The effects in a service's effect ledger, by command id; adds their number to `*total`.
std::map<std::string, int> EffectCounts(const std::string& address, int64_t* total) {
  auto counts = testing::EffectsByCommand(address);
  if (!counts.ok()) {
    Say("cannot read the effect ledger at " + address + ": " + counts.status().ToString());
    return {};
  }
  for (const auto& [id, n] : *counts) *total += n;
  return *std::move(counts);
}

// Whether the ledger at `address` holds the money it minted; its balance in `*balance`.
bool Conserved(const std::string& address, int64_t* balance) {
  auto total = testing::LedgerTotal(address);
  if (!total.ok()) return false;
  *balance = total->total_balance();
  return total->total_balance() == total->total_minted();
}

v1::Entity Account(const std::string& id) {
  v1::Entity e;
  e.set_type("account");
  e.set_id(id);
  return e;
}

// Where each component of the stack listens, and what it is.
void DescribeStack(const demo::Stack& stack, bool faults) {
  Say(absl::StrCat("  ledger           ", stack.ledger->address(), "  (inbox mode",
                   faults ? ", loses 3% of answers after applying)" : ")"));
  Say(absl::StrCat("  dedupe_sidecar   ", stack.sidecar->address(), "  -> ledger"));
  Say(absl::StrCat("  case_service     ", stack.cases->address(), "  (inbox mode",
                   faults ? ", loses 3% of answers after applying)" : ")"));
  Say(absl::StrCat("  dedupe_sidecar   ", stack.case_sidecar->address(), "  -> case_service"));
  Say(absl::StrCat("  legacy ledger    ", stack.legacy->address(), "  (no inbox, no outcome service)"));
  Say(absl::StrCat("  legacy sidecar   ", stack.legacy_sidecar->address(), "  -> legacy ledger"));
  Say(absl::StrCat("  outbox_agent     ", stack.agent->address(), "  -> both sidecars"));
}

struct SidecarReplays {
  int64_t attempts = 0;  // finished commands sent again, straight to the sidecar
  int64_t replayed = 0;  // answered from the sidecar's records, byte for byte
};

// Sends up to `limit` acknowledged ledger commands again, straight to the sidecar, as a
// second device or a restored backup would: the sidecar answers from its records.
SidecarReplays ReplayAtTheSidecar(const demo::Stack& stack,
                                  const std::map<std::string, v1::OutboxRecord>& records,
                                  int limit) {
  SidecarReplays out;
  auto sidecar = v1::Sidecar::NewStub(
      grpc::CreateChannel(stack.sidecar->address(), grpc::InsecureChannelCredentials()));
  int replayed_so_far = 0;
  for (const auto& [id, record] : records) {
    if (record.state() != v1::ACKED ||
        record.command().target_method().rfind("/eonce.ledger.v1.Ledger/", 0) != 0 ||
        ++replayed_so_far > limit) {
      continue;
    }
    auto context = Context();
    context->AddMetadata("eonce-tenant", "acme");
    context->AddMetadata("eonce-credential-epoch", absl::StrCat(record.command().credential_epoch()));
    v1::SubmitRequest request;
    *request.mutable_command() = record.command();
    v1::SubmitResponse response;
    ++out.attempts;
    if (sidecar->Submit(context.get(), request, &response).ok() &&
        response.disposition() == v1::REPLAYED &&
        response.result().response() == record.result().response()) {
      ++out.replayed;
    }
  }
  return out;
}

// Unknown outcomes parked for an operator, across the three sidecars.
int64_t ParkedOutcomes(const demo::Stack& stack) {
  int64_t parked = 0;
  for (Process* p : {stack.sidecar.get(), stack.case_sidecar.get(), stack.legacy_sidecar.get()}) {
    auto admin = v1::SidecarAdmin::NewStub(
        grpc::CreateChannel(p->address(), grpc::InsecureChannelCredentials()));
    auto context = Context();
    context->AddMetadata("eonce-tenant", "acme");
    context->AddMetadata(kOperatorHeader, "demo");
    v1::ListParkedRequest request;
    request.set_limit(1000);
    v1::ListParkedResponse response;
    if (admin->ListParked(context.get(), request, &response).ok()) parked += response.records_size();
  }
  return parked;
}

int Run() {
  quiet = absl::GetFlag(FLAGS_quiet);
  const int n = absl::GetFlag(FLAGS_commands);
  const int accounts = absl::GetFlag(FLAGS_accounts);
  const bool faults = absl::GetFlag(FLAGS_faults);
  std::mt19937_64 rng(absl::GetFlag(FLAGS_seed));

  demo::Stack stack;
  stack.bin = absl::GetFlag(FLAGS_bin_dir);
  char tmpl[] = "/tmp/eonce-demo-XXXXXX";
  stack.data = mkdtemp(tmpl);
  Say(absl::StrCat("eonce demo: data in ", stack.data, (faults ? ", faults on" : ", faults off")));
  if (absl::Status started = stack.Start(faults); !started.ok()) {
    std::cerr << "demo: " << started.message() << "\n";
    return 1;
  }
  DescribeStack(stack, faults);

  auto agent_client = AgentClient::Connect(stack.agent->address());
  Agent::Stub& agent = agent_client->stub();
  std::set<std::string> enqueued;
  int64_t agent_duplicates = 0;
  int64_t enqueue_failures = 0;

  // Enqueues through the agent like a producer would, retrying while the agent is
  // briefly unreachable; the command id makes every retry harmless.
  auto enqueue_entity = [&](const std::string& method, const google::protobuf::Message& request,
                            const v1::Entity& entity, const std::string& id,
                            const std::string& key) -> bool {
    v1::Command command;
    command.set_target_method(method);
    command.set_request(request.SerializeAsString());
    *command.mutable_entity() = entity;
    command.set_command_id(id);
    command.set_idempotency_key(key);
    for (int attempt = 0; attempt < 50; ++attempt) {
      auto r = agent_client->EnqueueOnce(command, 5000);
      if (r.ok()) {
        if (r->created()) enqueued.insert(id); else ++agent_duplicates;
        return true;
      }
      if (!stack.agent->Running()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ++enqueue_failures;
    return false;
  };
  auto enqueue = [&](const std::string& method, const google::protobuf::Message& request,
                     const std::string& account, const std::string& id,
                     const std::string& key = "") {
    return enqueue_entity(method, request, Account(account), id, key);
  };
  auto enqueue_case = [&](const std::string& method, const google::protobuf::Message& request,
                          const std::string& case_id, const std::string& id) {
    v1::Entity entity;
    entity.set_type("case");
    entity.set_id(case_id);
    return enqueue_entity(method, request, entity, id, "");
  };

  auto died = [&]() -> bool {
    for (Process* p : {stack.agent.get(), stack.ledger.get(), stack.cases.get(),
                       stack.legacy.get(), stack.sidecar.get(), stack.case_sidecar.get(),
                       stack.legacy_sidecar.get()}) {
      if (!p->Running()) {
        std::cerr << "\ndemo: a component died unexpectedly; its log is in " << stack.data << "\n";
        return true;
      }
    }
    return false;
  };

  // 1. Accounts.
  for (int i = 0; i < accounts; ++i) {
    ledger::v1::OpenAccountRequest open;
    open.set_id(absl::StrCat("acct", i));
    open.set_initial_balance(1000);
    if (!enqueue("/eonce.ledger.v1.Ledger/OpenAccount", open, open.id(), absl::StrCat("open-", i))) {
      died();
      return 1;
    }
  }

  // 2. Transfers, with duplicate submissions and the faults along the way.
  int64_t progress_total = accounts + n + 2 + 4 * std::max(5, n / 40) + 1;
  auto last_bar = std::chrono::steady_clock::now();
  bool killed = false, revoked = false;
  std::string conflict_key;
  for (int i = 0; i < n; ++i) {
    ledger::v1::TransferRequest t;
    int from = static_cast<int>(rng() % accounts);
    int to = (from + 1 + static_cast<int>(rng() % (accounts - 1))) % accounts;
    t.set_from(absl::StrCat("acct", from));
    t.set_to(absl::StrCat("acct", to));
    t.set_amount(1 + static_cast<int64_t>(rng() % 150));
    std::string id = absl::StrCat("t-", i);
    if (!enqueue("/eonce.ledger.v1.Ledger/Transfer", t, t.from(), id) && died()) return 1;
    if (rng() % 5 == 0) enqueue("/eonce.ledger.v1.Ledger/Transfer", t, t.from(), id);  // double click
    if (i == 10) {
      v1::Command c;
      c.set_command_id(id);
      c.set_target_method("/eonce.ledger.v1.Ledger/Transfer");
      *c.mutable_entity() = Account(t.from());
      conflict_key = DeriveIdempotencyKey(c);
    }
    if (faults && !killed && i == n * 2 / 5) {
      killed = true;
      if (!quiet) std::printf("\n");
      Say("  ! kill -9 dedupe_sidecar, and start it again on the same data");
      if (absl::Status restarted = stack.RestartSidecar(); !restarted.ok()) {
        std::cerr << "demo: " << restarted.message() << "\n";
        return 1;
      }
    }
    if (faults && !revoked && i == n * 3 / 5) {
      revoked = true;
      if (!quiet) std::printf("\n");
      Say("  ! credential revoked: replay stops, answers in flight are fenced off");
      v1::SetCredentialRequest revoke;
      revoke.set_epoch(1);
      revoke.set_revoked(true);
      v1::SetCredentialResponse r;
      auto context = Context();
      agent.SetCredential(context.get(), revoke, &r);
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      Say("  ! credential renewed (epoch 2): replay resumes");
      v1::SetCredentialRequest renew;
      renew.set_epoch(2);
      auto context2 = Context();
      agent.SetCredential(context2.get(), renew, &r);
    }
    if (!quiet && std::chrono::steady_clock::now() - last_bar > std::chrono::milliseconds(200)) {
      last_bar = std::chrono::steady_clock::now();
      auto counts = Counts(agent);
      int64_t fin = counts["acked"] + counts["rejected"] + counts["conflict"] +
                    counts["dead_lettered"] + counts["expired"];
      std::printf("\r  %s   ", Bar(counts, fin, progress_total).c_str());
      std::fflush(stdout);
    }
  }

  // Case management: each case is created and moved through review by commands that name
  // the revision they expect; the agent keeps one case's commands in order. One stale
  // command (an old revision) is a terminal conflict.
  const int case_count = std::max(5, n / 40);
  for (int k = 0; k < case_count; ++k) {
    std::string case_id = absl::StrCat("case", k);
    case_mgmt::v1::CreateCaseRequest create;
    create.set_id(case_id);
    create.set_title("suspicious transfer review");
    if (!enqueue_case("/eonce.case_mgmt.v1.Cases/CreateCase", create, case_id,
                      absl::StrCat(case_id, "-create"))) {
      died();
      return 1;
    }
    const case_mgmt::v1::Status path[] = {case_mgmt::v1::IN_REVIEW, case_mgmt::v1::APPROVED,
                                          case_mgmt::v1::CLOSED};
    for (int step = 0; step < 3; ++step) {
      case_mgmt::v1::TransitionRequest t;
      t.set_id(case_id);
      t.set_expected_revision(step + 1);
      t.set_next_status(path[step]);
      t.set_reason_code("REVIEWED");
      enqueue_case("/eonce.case_mgmt.v1.Cases/Transition", t, case_id,
                   absl::StrCat(case_id, "-step", step));
    }
  }
  case_mgmt::v1::TransitionRequest stale;
  stale.set_id("case0");
  stale.set_expected_revision(1);
  stale.set_next_status(case_mgmt::v1::CLOSED);
  enqueue_case("/eonce.case_mgmt.v1.Cases/Transition", stale, "case0", "case0-stale");

  // 3. A business rejection on purpose, and a key reused with another payload.
  ledger::v1::TransferRequest huge;
  huge.set_from("acct0");
  huge.set_to("acct1");
  huge.set_amount(1'000'000);
  enqueue("/eonce.ledger.v1.Ledger/Transfer", huge, "acct0", "too-much");
  ledger::v1::TransferRequest other;
  other.set_from("acct3");
  other.set_to("acct4");
  other.set_amount(1);
  enqueue("/eonce.ledger.v1.Ledger/Transfer", other, "acct3", "reused-key", conflict_key);

  // 4. A caller without the agent: transparent mode through the legacy sidecar, retrying
  // like any gRPC client would. A lost answer there cannot be resolved: it is parked.
  auto legacy = Ledger::NewStub(
      grpc::CreateChannel(stack.legacy_sidecar->address(), grpc::InsecureChannelCredentials()));
  int64_t legacy_calls = 0;
  for (const char* id : {"l0", "l1"}) {
    ledger::v1::OpenAccountRequest open;
    open.set_id(id);
    open.set_initial_balance(500);
    for (int attempt = 0; attempt < 20; ++attempt) {
      auto context = Context();
      context->AddMetadata("idempotency-key", absl::StrCat("legacy-open-", id));
      context->AddMetadata("eonce-tenant", "acme");
      ledger::v1::Account account;
      ++legacy_calls;
      grpc::Status s = legacy->OpenAccount(context.get(), open, &account);
      if (s.ok() || s.error_code() == grpc::StatusCode::FAILED_PRECONDITION ||
          s.error_code() == grpc::StatusCode::ALREADY_EXISTS) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  std::set<std::string> legacy_keys;
  for (int i = 0; i < 20; ++i) {
    ledger::v1::TransferRequest t;
    t.set_from(i % 2 ? "l0" : "l1");
    t.set_to(i % 2 ? "l1" : "l0");
    t.set_amount(5);
    std::string key = absl::StrCat("legacy-pay-", i);
    legacy_keys.insert(key);
    for (int attempt = 0; attempt < 20; ++attempt) {
      auto context = Context();
      context->AddMetadata("idempotency-key", key);
      context->AddMetadata("eonce-tenant", "acme");
      ledger::v1::TransferResponse response;
      ++legacy_calls;
      grpc::Status s = legacy->Transfer(context.get(), t, &response);
      if (s.error_code() != grpc::StatusCode::UNAVAILABLE) break;  // answered, or parked
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }

  // 5. Wait until every command is final.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(absl::GetFlag(FLAGS_timeout_s));
  std::map<std::string, int64_t> counts;
  bool settled = false;
  while (std::chrono::steady_clock::now() < deadline) {
    counts = Counts(agent);
    int64_t waiting = counts["queued"] + counts["claimed"] + counts["sending"] +
                      counts["retryable_failed"] + counts["unknown"];
    int64_t fin = counts["acked"] + counts["rejected"] + counts["conflict"] +
                  counts["dead_lettered"] + counts["expired"];
    if (!quiet) {
      std::printf("\r  %s   ", Bar(counts, fin, static_cast<int64_t>(enqueued.size())).c_str());
      std::fflush(stdout);
    }
    if (waiting == 0 && fin >= static_cast<int64_t>(enqueued.size())) {
      settled = true;
      break;
    }
    if (died()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  if (!quiet) std::printf("\n");

  // 6. Then replay some finished commands straight at the sidecar, as a second device or
  // a restored backup would: the sidecar answers from its records.
  auto listed = testing::AllRecords(agent);
  if (!listed.ok()) Say("cannot list the agent's records: " + listed.status().ToString());
  auto records = listed.ok() ? *std::move(listed) : std::map<std::string, v1::OutboxRecord>();
  const SidecarReplays direct = ReplayAtTheSidecar(stack, records, n / 10);
  const int64_t sidecar_replays = direct.replayed, direct_attempts = direct.attempts;

  // 7. The verdict, from the ground truth: the services' effect ledgers.
  int64_t effects = 0;
  auto ledger_effects = EffectCounts(stack.ledger->address(), &effects);
  auto legacy_effects = EffectCounts(stack.legacy->address(), &effects);
  auto case_effects = EffectCounts(stack.cases->address(), &effects);
  int64_t attempts = direct_attempts + legacy_calls, conflicts = 0, rejected = 0,
          dead_letters = 0, lost = 0, duplicate_effects = 0, replayed_by_sidecar = sidecar_replays;
  for (const auto& [id, record] : records) {
    attempts += record.attempt();
    if (record.replay().replayed()) ++replayed_by_sidecar;
  }
  for (const std::string& id : enqueued) {
    auto it = records.find(id);
    if (it == records.end()) {
      ++lost;
      continue;
    }
    const v1::OutboxRecord& r = it->second;
    switch (r.state()) {
      case v1::ACKED:
        // Acked must mean applied exactly once, by the service the command went to.
        if (ledger_effects[id] + case_effects[id] != 1) ++lost;
        break;
      case v1::REJECTED: ++rejected; break;
      case v1::CONFLICT: ++conflicts; break;
      case v1::DEAD_LETTERED: ++dead_letters; break;
      default:
        if (!IsFinal(r.state())) ++lost;
        break;
    }
  }
  for (const auto* m : {&ledger_effects, &legacy_effects, &case_effects}) {
    for (const auto& [id, count] : *m) duplicate_effects += count > 1;
  }
  const int64_t parked = ParkedOutcomes(stack);
  int64_t balance = 0, legacy_balance = 0;
  bool conserved = Conserved(stack.ledger->address(), &balance) &&
                   Conserved(stack.legacy->address(), &legacy_balance);
  demo::Figures figures;
  figures.commands = static_cast<int64_t>(enqueued.size());
  figures.direct_calls = static_cast<int64_t>(legacy_keys.size());
  figures.agent_duplicates = agent_duplicates;
  figures.attempts = attempts;
  figures.replayed_by_sidecar = replayed_by_sidecar;
  figures.effects = effects;
  figures.conflicts = conflicts;
  figures.rejected = rejected;
  figures.dead_letters = dead_letters;
  figures.parked = parked;
  figures.lost = lost;
  figures.duplicate_effects = duplicate_effects;
  figures.balance = balance;
  figures.minted = accounts * 1000;
  figures.conserved = conserved;
  figures.settled = settled;
  demo::Report(figures, quiet);
  std::fflush(stdout);

  stack.StopAll();
  if (absl::GetFlag(FLAGS_keep)) {
    Say(absl::StrCat("  data kept in ", stack.data));
  } else {
    std::error_code ignored;
    fs::remove_all(stack.data, ignored);
  }
  bool ok = settled && lost == 0 && duplicate_effects == 0 && conserved && enqueue_failures == 0;
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace eonce

int main(int argc, char** argv) {
  eonce::ParseFlags(argc, argv, {"demo [--commands=N] [--nofaults] [--keep] [--quiet]"});
  signal(SIGPIPE, SIG_IGN);
  return eonce::Run();
}
