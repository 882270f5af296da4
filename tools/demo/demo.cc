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

#include <algorithm>
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
#include "common/command/command.h"
#include "common/base/flags.h"
#include "common/rpc/grpc_status.h"
#include "common/base/status.h"
#include "eonce/case/v1/case.grpc.pb.h"
#include "eonce/ledger/v1/ledger.grpc.pb.h"
#include "eonce/v1/agent.grpc.pb.h"
#include "eonce/v1/outcome.grpc.pb.h"
#include "eonce/v1/sidecar.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "outbox_agent/client/client.h"
#include "tests/util/ground_truth.h"
#include "tools/demo/demo_stack.h"
#include "tools/demo/report.h"
#include "tools/demo/shards.h"
#include "tools/demo/sidecar_checks.h"
#include "common/coord/slots.h"
#include "tests/util/process.h"

ABSL_FLAG(std::string, bin_dir, "bazel-bin", "where the built binaries are");
ABSL_FLAG(int32_t, commands, 2000, "transfers to send through the agent");
ABSL_FLAG(int32_t, accounts, 40, "ledger accounts");
ABSL_FLAG(bool, faults, true, "kill the sidecar, lose answers, revoke the credential");
ABSL_FLAG(bool, keep, false, "keep the data folder (its path is printed)");
ABSL_FLAG(bool, quiet, false, "no progress bar and no report, only the summary line");
ABSL_FLAG(uint64_t, seed, 42, "the workload's seed");
ABSL_FLAG(int32_t, shards, 1,
          "the ledger's sidecars (1..8); with more than one, a run of slots moves mid-run");
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


// The effects in a service's effect ledger, by command id (none, said aloud, when it
// cannot be read: the verdict then fails).
std::map<std::string, int> EffectCounts(const std::string& address) {
  auto counts = testing::EffectsByCommand(address);
  if (!counts.ok()) {
    Say("cannot read the effect ledger at " + address + ": " + counts.status().ToString());
    return {};
  }
  return *std::move(counts);
}

// The addresses of a ledger's shards.
std::vector<std::string> Addresses(const std::vector<Process*>& ledgers) {
  std::vector<std::string> addresses;
  for (Process* ledger : ledgers) addresses.push_back(ledger->address());
  return addresses;
}

// Whether the ledger (all its shards) holds the money it minted, with nothing in flight
// between shards; its balance in `*balance`.
bool Conserved(const std::vector<Process*>& ledgers, int64_t* balance) {
  auto money = testing::LedgerTotalAcross(Addresses(ledgers));
  if (!money.ok()) return false;
  *balance = money->total_balance();
  return money->total_balance() + money->unclaimed() == money->total_minted() &&
         money->credits_sent() == money->credits_received();
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
  std::vector<Process*> shards = stack.LedgerSidecars();
  std::vector<Process*> ledgers = stack.Ledgers();
  for (size_t i = 0; i < shards.size(); ++i) {
    if (i > 0) Say(absl::StrCat("  ledger           ", ledgers[i]->address(), "  (shard s", i, ")"));
    Say(absl::StrCat("  dedupe_sidecar   ", shards[i]->address(), "  -> ledger",
                     shards.size() > 1 ? absl::StrCat(" (shard s", i, " of the slot map)") : ""));
    if (i < stack.relays.size()) {
      Say(absl::StrCat("  outbox_agent     ", stack.relays[i]->address(), "  relays s", i,
                       "'s credits to other shards"));
    }
  }
  Say(absl::StrCat("  case_service     ", stack.cases->address(), "  (inbox mode",
                   faults ? ", loses 3% of answers after applying)" : ")"));
  Say(absl::StrCat("  dedupe_sidecar   ", stack.case_sidecar->address(), "  -> case_service"));
  Say(absl::StrCat("  legacy ledger    ", stack.legacy->address(), "  (no inbox, no outcome service)"));
  Say(absl::StrCat("  legacy sidecar   ", stack.legacy_sidecar->address(), "  -> legacy ledger"));
  Say(absl::StrCat("  outbox_agent     ", stack.agent->address(), "  -> both sidecars"));
}

// One run of the demo: the stack, what the producer enqueued, and what each phase adds.
// Run() is the script; each phase is one method.
class Demo {
 public:
  Demo()
      : n_(absl::GetFlag(FLAGS_commands)),
        accounts_(absl::GetFlag(FLAGS_accounts)),
        faults_(absl::GetFlag(FLAGS_faults)),
        rng_(absl::GetFlag(FLAGS_seed)) {
    stack_.shards = std::clamp(absl::GetFlag(FLAGS_shards), 1, 8);
  }

  int Run() {
    if (!Start()) return 1;
    // 1. Accounts, 2. transfers with duplicates and faults, 3. cases, 4. a rejection and
    // a reused key, 5. a caller without the agent.
    if (!OpenAccounts() || !Transfers() || !Cases()) return 1;
    RejectionAndReusedKey();
    LegacyCaller();
    // 6. Wait until every command is final, 7. replay some at the sidecar, 8. the verdict.
    const bool settled = WaitUntilFinal();
    return Verdict(settled);
  }

 private:
  bool Start() {
    stack_.bin = absl::GetFlag(FLAGS_bin_dir);
    char tmpl[] = "/tmp/eonce-demo-XXXXXX";
    stack_.data = mkdtemp(tmpl);
    Say(absl::StrCat("eonce demo: data in ", stack_.data,
                     (faults_ ? ", faults on" : ", faults off")));
    if (absl::Status started = stack_.Start(faults_); !started.ok()) {
      std::cerr << "demo: " << started.message() << "\n";
      return false;
    }
    DescribeStack(stack_, faults_);
    agent_client_ = AgentClient::Connect(stack_.agent->address());
    return true;
  }

  Agent::Stub& agent() { return agent_client_->stub(); }

  // Enqueues through the agent like a producer would, retrying while the agent is
  // briefly unreachable; the command id makes every retry harmless.
  bool Enqueue(const std::string& method, const google::protobuf::Message& request,
               const v1::Entity& entity, const std::string& id, const std::string& key = "") {
    v1::Command command;
    command.set_target_method(method);
    command.set_request(request.SerializeAsString());
    *command.mutable_entity() = entity;
    command.set_command_id(id);
    command.set_idempotency_key(key);
    for (int attempt = 0; attempt < 50; ++attempt) {
      auto r = agent_client_->EnqueueOnce(command, 5000);
      if (r.ok()) {
        if (r->created()) enqueued_.insert(id); else ++agent_duplicates_;
        return true;
      }
      if (!stack_.agent->Running()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ++enqueue_failures_;
    return false;
  }

  static v1::Entity Case(const std::string& id) {
    v1::Entity entity;
    entity.set_type("case");
    entity.set_id(id);
    return entity;
  }

  bool Died() {
    std::vector<Process*> all = stack_.LedgerSidecars();
    for (Process* p : stack_.Ledgers()) all.push_back(p);
    for (const auto& relay : stack_.relays) all.push_back(relay.get());
    for (Process* p : {stack_.agent.get(), stack_.cases.get(),
                       stack_.legacy.get(), stack_.case_sidecar.get(),
                       stack_.legacy_sidecar.get()}) {
      all.push_back(p);
    }
    for (Process* p : all) {
      if (!p->Running()) {
        std::cerr << "\ndemo: a component died unexpectedly; its log is in " << stack_.data
                  << "\n";
        return true;
      }
    }
    return false;
  }

  bool OpenAccounts() {
    for (int i = 0; i < accounts_; ++i) {
      ledger::v1::OpenAccountRequest open;
      open.set_id(absl::StrCat("acct", i));
      open.set_initial_balance(1000);
      if (!Enqueue("/eonce.ledger.v1.Ledger/OpenAccount", open, Account(open.id()),
                   absl::StrCat("open-", i))) {
        Died();
        return false;
      }
    }
    return true;
  }

  // Transfers, with duplicate submissions and the faults along the way.
  bool Transfers() {
    const int64_t progress_total = accounts_ + n_ + 2 + 4 * std::max(5, n_ / 40) + 1;
    auto last_bar = std::chrono::steady_clock::now();
    for (int i = 0; i < n_; ++i) {
      ledger::v1::TransferRequest t;
      int from = static_cast<int>(rng_() % accounts_);
      int to = (from + 1 + static_cast<int>(rng_() % (accounts_ - 1))) % accounts_;
      t.set_from(absl::StrCat("acct", from));
      t.set_to(absl::StrCat("acct", to));
      t.set_amount(1 + static_cast<int64_t>(rng_() % 150));
      std::string id = absl::StrCat("t-", i);
      if (!Enqueue(kTransfer, t, Account(t.from()), id) && Died()) return false;
      if (stack_.shards > 1 && ShardOf(t.from()) != ShardOf(t.to())) ++cross_shard_;
      if (rng_() % 5 == 0) Enqueue(kTransfer, t, Account(t.from()), id);  // double click
      if (i == 10) {
        v1::Command c;
        c.set_command_id(id);
        c.set_target_method(kTransfer);
        *c.mutable_entity() = Account(t.from());
        conflict_key_ = DeriveIdempotencyKey(c);
      }
      if (faults_ && i == n_ * 2 / 5 && !KillTheSidecar()) return false;
      if (faults_ && i == n_ * 3 / 5) RevokeAndRenew();
      if (stack_.shards > 1 && i == n_ / 2 && !Reshard()) return false;
      if (!quiet && std::chrono::steady_clock::now() - last_bar > std::chrono::milliseconds(200)) {
        last_bar = std::chrono::steady_clock::now();
        auto counts = demo::Counts(agent());
        ShowProgress(counts, progress_total);
      }
    }
    return true;
  }

  bool KillTheSidecar() {
    if (!quiet) std::printf("\n");
    Say("  ! kill -9 dedupe_sidecar, and start it again on the same data");
    if (absl::Status restarted = stack_.RestartSidecar(); !restarted.ok()) {
      std::cerr << "demo: " << restarted.message() << "\n";
      return false;
    }
    return true;
  }

  // The shard that owns account `id`'s slot now; -1 if the map cannot be read. The map is
  // read once, and again after each move (the demo makes every change to it).
  int ShardOf(const std::string& id) {
    if (map_ == nullptr) {
      if (stack_.etcd == nullptr) return -1;
      absl::StatusOr<SlotMap> map = stack_.etcd->store().Read();
      if (!map.ok()) return -1;
      map_ = std::make_unique<SlotMap>(*std::move(map));
    }
    return demo::ShardOf(*map_, "acme", "account", id);
  }

  // Moves slots 0-127 from s0 to s1 with the real `eonce reshard` while transfers flow.
  // With faults, its first run stops after the copy, as if it had been killed there; the
  // second run goes on from the map's state.
  bool Reshard() {
    if (!quiet) std::printf("\n");
    std::vector<std::string> args = stack_.EtcdFlags();
    for (const char* flag : {"--slots=0-127", "--to=s1", "--tenant=acme", "--operator_name=demo"}) {
      args.push_back(flag);
    }
    const std::string log = stack_.data + "/reshard.log";
    if (faults_) {
      std::vector<std::string> interrupted = args;
      interrupted.push_back("--stop_after=copy");
      Say("  ! eonce reshard: slots 0-127 from s0 to s1; it stops after the copy (as if killed)");
      if (demo::RunReshard(stack_.bin, interrupted, log) != 0) {
        std::cerr << "demo: reshard failed; see " << log << "\n";
        return false;
      }
    }
    Say(faults_ ? "  ! eonce reshard again: it resumes from the map in etcd and finishes the move"
                : "  ! eonce reshard: slots 0-127 from s0 to s1, while transfers flow");
    if (demo::RunReshard(stack_.bin, args, log) != 0) {
      std::cerr << "demo: reshard failed; see " << log << "\n";
      return false;
    }
    ++reshards_;
    map_.reset();
    return true;
  }

  void RevokeAndRenew() {
    if (!quiet) std::printf("\n");
    Say("  ! credential revoked: replay stops, answers in flight are fenced off");
    v1::SetCredentialRequest revoke;
    revoke.set_epoch(1);
    revoke.set_revoked(true);
    v1::SetCredentialResponse r;
    auto context = Context();
    context->AddMetadata(kOperatorHeader, "demo");  // the agent's operator calls
    agent().SetCredential(context.get(), revoke, &r);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    Say("  ! credential renewed (epoch 2): replay resumes");
    v1::SetCredentialRequest renew;
    renew.set_epoch(2);
    auto context2 = Context();
    context2->AddMetadata(kOperatorHeader, "demo");
    agent().SetCredential(context2.get(), renew, &r);
  }

  // The progress bar of `counts` (Counts); `total` is what the bar counts up to.
  static void ShowProgress(std::map<std::string, int64_t>& counts, int64_t total) {
    std::printf("\r  %s   ", demo::Bar(counts, demo::Finished(counts), total).c_str());
    std::fflush(stdout);
  }

  // Case management: each case is created and moved through review by commands that name
  // the revision they expect; the agent keeps one case's commands in order. One stale
  // command (an old revision) is a terminal conflict.
  bool Cases() {
    const int case_count = std::max(5, n_ / 40);
    for (int k = 0; k < case_count; ++k) {
      std::string case_id = absl::StrCat("case", k);
      case_mgmt::v1::CreateCaseRequest create;
      create.set_id(case_id);
      create.set_title("suspicious transfer review");
      if (!Enqueue("/eonce.case_mgmt.v1.Cases/CreateCase", create, Case(case_id),
                   absl::StrCat(case_id, "-create"))) {
        Died();
        return false;
      }
      const case_mgmt::v1::Status path[] = {case_mgmt::v1::IN_REVIEW, case_mgmt::v1::APPROVED,
                                            case_mgmt::v1::CLOSED};
      for (int step = 0; step < 3; ++step) {
        case_mgmt::v1::TransitionRequest t;
        t.set_id(case_id);
        t.set_expected_revision(step + 1);
        t.set_next_status(path[step]);
        t.set_reason_code("REVIEWED");
        Enqueue(kCaseTransition, t, Case(case_id), absl::StrCat(case_id, "-step", step));
      }
    }
    case_mgmt::v1::TransitionRequest stale;
    stale.set_id("case0");
    stale.set_expected_revision(1);
    stale.set_next_status(case_mgmt::v1::CLOSED);
    Enqueue(kCaseTransition, stale, Case("case0"), "case0-stale");
    return true;
  }

  // A business rejection on purpose, and a key reused with another payload.
  void RejectionAndReusedKey() {
    ledger::v1::TransferRequest huge;
    huge.set_from("acct0");
    huge.set_to("acct1");
    huge.set_amount(1'000'000);
    Enqueue(kTransfer, huge, Account("acct0"), "too-much");
    ledger::v1::TransferRequest other;
    other.set_from("acct3");
    other.set_to("acct4");
    other.set_amount(1);
    Enqueue(kTransfer, other, Account("acct3"), "reused-key", conflict_key_);
  }

  // A caller without the agent: transparent mode through the legacy sidecar, retrying
  // like any gRPC client would. A lost answer there cannot be resolved: it is parked.
  void LegacyCaller() {
    auto legacy = Ledger::NewStub(
        grpc::CreateChannel(stack_.legacy_sidecar->address(), grpc::InsecureChannelCredentials()));
    // Calls `call` with a fresh keyed context until `done` says the status is an answer.
    auto call_until = [&](const std::string& key, auto call, auto done) {
      for (int attempt = 0; attempt < 20; ++attempt) {
        auto context = Context();
        context->AddMetadata("idempotency-key", key);
        context->AddMetadata("eonce-tenant", "acme");
        ++legacy_calls_;
        if (done(call(context.get()))) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    };
    for (const char* id : {"l0", "l1"}) {
      ledger::v1::OpenAccountRequest open;
      open.set_id(id);
      open.set_initial_balance(500);
      call_until(
          absl::StrCat("legacy-open-", id),
          [&](grpc::ClientContext* context) {
            ledger::v1::Account account;
            return legacy->OpenAccount(context, open, &account);
          },
          [](const grpc::Status& s) {
            return s.ok() || s.error_code() == grpc::StatusCode::FAILED_PRECONDITION ||
                   s.error_code() == grpc::StatusCode::ALREADY_EXISTS;
          });
    }
    for (int i = 0; i < 20; ++i) {
      ledger::v1::TransferRequest t;
      t.set_from(i % 2 ? "l0" : "l1");
      t.set_to(i % 2 ? "l1" : "l0");
      t.set_amount(5);
      std::string key = absl::StrCat("legacy-pay-", i);
      legacy_keys_.insert(key);
      call_until(
          key,
          [&](grpc::ClientContext* context) {
            ledger::v1::TransferResponse response;
            return legacy->Transfer(context, t, &response);
          },
          // Answered, or parked.
          [](const grpc::Status& s) { return s.error_code() != grpc::StatusCode::UNAVAILABLE; });
    }
  }

  // Waits until every command is final (or the timeout); true if they all are.
  bool WaitUntilFinal() {
    auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(absl::GetFlag(FLAGS_timeout_s));
    bool settled = false;
    while (std::chrono::steady_clock::now() < deadline) {
      auto counts = demo::Counts(agent());
      int64_t waiting = counts["queued"] + counts["claimed"] + counts["sending"] +
                        counts["retryable_failed"] + counts["unknown"];
      if (!quiet) ShowProgress(counts, static_cast<int64_t>(enqueued_.size()));
      if (waiting == 0 && demo::Finished(counts) >= static_cast<int64_t>(enqueued_.size())) {
        settled = true;
        break;
      }
      if (Died()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    if (!quiet) std::printf("\n");
    // Sharded: the credits between shards land after their debits were answered. Wait
    // until none is in flight (the relays are idle).
    while (settled && stack_.shards > 1 && std::chrono::steady_clock::now() < deadline) {
      auto money = testing::LedgerTotalAcross(Addresses(stack_.Ledgers()));
      if (money.ok() && money->credits_sent() == money->credits_received()) break;
      if (Died()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    return settled;
  }

  // Replays some finished commands at the sidecar, then judges from the ground truth (the
  // services' effect ledgers), prints the report and stops the stack. 0 if every
  // invariant held.
  int Verdict(bool settled) {
    auto listed = testing::AllRecords(agent());
    if (!listed.ok()) Say("cannot list the agent's records: " + listed.status().ToString());
    auto records = listed.ok() ? *std::move(listed) : std::map<std::string, v1::OutboxRecord>();
    const demo::SidecarReplays direct = demo::ReplayAtTheSidecar(stack_, records, n_ / 10);

    // The ledger's shards' effects as one ledger: a command applied on two shards is a
    // duplicate. Credits (the relays' commands) count there too.
    auto merged = testing::EffectsByCommandAcross(Addresses(stack_.Ledgers()));
    if (!merged.ok()) Say("cannot read the ledger's effects: " + merged.status().ToString());
    const std::map<std::string, int> ledger_effects =
        merged.value_or(std::map<std::string, int>());
    int64_t credits = 0;
    for (const auto& [id, n] : ledger_effects) {
      if (id.rfind("fu-", 0) == 0) credits += n;
    }
    const testing::Judgement judged =
        testing::Judge(enqueued_, records, {ledger_effects, EffectCounts(stack_.cases->address())},
                       {EffectCounts(stack_.legacy->address())});
    demo::Figures figures;
    figures.attempts = direct.attempts + legacy_calls_;
    figures.replayed_by_sidecar = direct.replayed;
    for (const auto& [id, record] : records) {
      figures.attempts += record.attempt();
      if (record.replay().replayed()) ++figures.replayed_by_sidecar;
    }
    // Whatever is not final by now is lost to the producer.
    figures.lost = judged.lost + judged.not_final;
    figures.rejected = judged.rejected;
    figures.conflicts = judged.conflicts;
    figures.dead_letters = judged.dead_letters;
    figures.duplicate_effects = judged.duplicate_effects;
    figures.effects = judged.effects;
    int64_t legacy_balance = 0;
    figures.conserved = Conserved(stack_.Ledgers(), &figures.balance) &&
                        Conserved({stack_.legacy.get()}, &legacy_balance);
    figures.commands = static_cast<int64_t>(enqueued_.size());
    figures.direct_calls = static_cast<int64_t>(legacy_keys_.size());
    figures.agent_duplicates = agent_duplicates_;
    figures.parked = demo::ParkedOutcomes(stack_);
    figures.minted = accounts_ * 1000;
    figures.settled = settled;
    figures.shards = stack_.shards;
    figures.reshards = reshards_;
    figures.cross_shard = cross_shard_;
    figures.credits = credits;
    demo::Report(figures, quiet);
    std::fflush(stdout);

    stack_.StopAll();
    if (absl::GetFlag(FLAGS_keep)) {
      Say(absl::StrCat("  data kept in ", stack_.data));
    } else {
      std::error_code ignored;
      fs::remove_all(stack_.data, ignored);
    }
    bool ok = settled && figures.lost == 0 && figures.duplicate_effects == 0 &&
              figures.conserved && enqueue_failures_ == 0;
    return ok ? 0 : 1;
  }

  static constexpr char kTransfer[] = "/eonce.ledger.v1.Ledger/Transfer";
  static constexpr char kCaseTransition[] = "/eonce.case_mgmt.v1.Cases/Transition";

  const int n_;
  const int accounts_;
  const bool faults_;
  std::mt19937_64 rng_;
  demo::Stack stack_;
  std::unique_ptr<AgentClient> agent_client_;
  std::set<std::string> enqueued_;
  std::set<std::string> legacy_keys_;
  std::string conflict_key_;
  int64_t agent_duplicates_ = 0;
  int64_t enqueue_failures_ = 0;
  int64_t legacy_calls_ = 0;
  int64_t reshards_ = 0;
  int64_t cross_shard_ = 0;
  std::unique_ptr<SlotMap> map_;  // the slot map as ShardOf last read it
};

}  // namespace
}  // namespace eonce

int main(int argc, char** argv) {
  eonce::ParseFlags(argc, argv,
                    {"demo [--commands=N] [--shards=N] [--nofaults] [--keep] [--quiet]"});
  signal(SIGPIPE, SIG_IGN);
  eonce::quiet = absl::GetFlag(FLAGS_quiet);
  return eonce::Demo().Run();
}
