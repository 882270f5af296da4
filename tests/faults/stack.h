// FaultStack: the real binaries (ledger_service, dedupe_sidecar, outbox_agent) as child
// processes on loopback, with data in a test folder, for the fault tests. Each keeps its
// port across restarts, so a component killed with kill -9 comes back where its callers
// expect it. Optionally a FaultProxy sits on every hop:
//   producer -> [proxy] -> agent -> [proxy] -> sidecar -> [proxy] -> ledger
//
// It also holds the load client and the verdict: the same invariants as the simulation,
// read from the ground truth (the ledger's effect ledger and its total).
#ifndef EONCE_TESTS_FAULTS_STACK_H_
#define EONCE_TESTS_FAULTS_STACK_H_

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "eonce/v1/agent.grpc.pb.h"
#include "tests/util/fault_proxy.h"
#include "tests/util/ground_truth.h"
#include "tests/util/process.h"

namespace eonce::testing {

// A child process that keeps its loopback port across restarts: it listens on port 0 the
// first time, and on that port after, so its callers find it where they expect it.
struct PortedProcess {
  std::string name;
  std::string binary;
  std::vector<std::string> args;
  std::string port;  // fixed after the first start
  std::unique_ptr<Process> process;
};

// Starts `p` (again, after a kill, on its port), its log in dir/<name>.log. A port briefly
// held by the process that died is tried again for up to 10 s.
absl::Status StartOnItsPort(PortedProcess& p, const std::string& dir);

enum class Component { kLedger, kSidecar, kAgent };
const char* ComponentName(Component c);

struct StackOptions {
  bool proxies = false;
  bool legacy_ledger = false;  // no inbox: a second forward would be a second effect
  int agents = 1;
  // Where the sidecar's and the agents' stores live; empty: the stack's folder.
  std::string store_root;
  std::vector<std::string> ledger_args;
  std::vector<std::string> sidecar_args;
  std::vector<std::string> agent_args;
  uint64_t seed = 1;
};

class FaultStack {
 public:
  static absl::StatusOr<std::unique_ptr<FaultStack>> Start(const std::string& dir,
                                                           StackOptions options);
  ~FaultStack();

  // kill -9, then start again on the same port and data. `agent` picks among agents.
  absl::Status KillAndRestart(Component component, int agent = 0);
  Process& process(Component component, int agent = 0);

  // Where producers reach agent `i` (through its proxy, if any).
  std::string agent_address(int i = 0) const;
  // The proxy in front of a component, or null.
  FaultProxy* proxy_to(Component component);

  const std::string& dir() const { return dir_; }

 private:
  using Member = PortedProcess;
  FaultStack() = default;
  // Starts `m`; with proxies on, also a proxy in front of it. Returns where callers dial.
  absl::StatusOr<std::string> StartBehindProxy(Member& m, std::unique_ptr<FaultProxy>& proxy,
                                               uint64_t seed);
  Member& member(Component component, int agent);

  std::string dir_;
  StackOptions options_;
  Member ledger_, sidecar_;
  std::vector<Member> agents_;
  std::unique_ptr<FaultProxy> to_ledger_, to_sidecar_;
  std::vector<std::unique_ptr<FaultProxy>> to_agents_;
};

// A producer: enqueues commands through an agent, retrying the same command (same id,
// same key, same payload) until the agent has it durably, as a real producer would.
class LoadClient {
 public:
  // Accounts are named <account_prefix><n>: two producers of two tenants keep theirs apart.
  explicit LoadClient(std::string agent_address, std::string account_prefix = "acct");

  // Opens `accounts` accounts with `initial` each, then enqueues `transfers` transfers
  // between them (seeded), on `threads` threads. Each command is retried for up to
  // `give_up_ms`. Returns how many could not be enqueued. Transfers are named
  // <transfer_prefix><n>: a producer that runs again with another prefix adds new ones
  // (and sends the same openings again, as duplicates).
  int64_t Run(int accounts, int64_t initial, int transfers, int threads, uint64_t seed,
              int64_t give_up_ms = 60'000, const std::string& transfer_prefix = "t-");

  // The ids the agent acknowledged.
  std::set<std::string> acked() const;

 private:
  bool Enqueue(v1::Agent::Stub& stub, const v1::Command& command, int64_t give_up_ms);
  std::string address_;
  std::string account_prefix_;
  mutable absl::Mutex mu_;
  std::set<std::string> acked_ ABSL_GUARDED_BY(mu_);
};

struct Verdict {
  int64_t acked = 0;        // commands the agent acknowledged
  // From Judge (tests/util/ground_truth.h):
  int64_t applied = 0;      // ACKED records with exactly one effect
  int64_t rejected = 0;     // business rejections (e.g. too little balance)
  int64_t not_final = 0;    // still waiting when time ran out
  int64_t other_final = 0;  // dead-lettered, expired, conflict, dropped
  int64_t lost = 0;         // acknowledged but missing, or ACKED without exactly one effect
  int64_t duplicate_effects = 0;
  int64_t effects = 0;
  bool conserved = false;
  bool listed_all = true;  // every page of the agent's records was read
  std::string list_error;
  int64_t total = 0;
  int64_t minted = 0;

  bool ok() const {
    return listed_all && not_final == 0 && other_final == 0 && lost == 0 &&
           duplicate_effects == 0 && conserved && applied + rejected == acked;
  }
  std::string ToString() const;
};

// The operator's runbook for parked outcomes (a legacy business), with the effect ledger
// as the truth: each parked record is resolved as applied (when its command has an
// effect) or not applied. Returns how many were resolved.
int ResolveParkedFromTheLedger(const std::string& sidecar_address,
                               const std::string& ledger_address);

// How many of the agent's records are not final; -1 when it cannot be asked.
int64_t Waiting(const std::string& agent_address);

// Waits (up to `timeout_ms`) until the agent has nothing waiting, then reads every record
// and the ledger's effects and total.
Verdict WaitAndCheck(const std::string& agent_address, const std::string& ledger_address,
                     const std::set<std::string>& acked, int64_t timeout_ms);

// Copies the components' logs (dir/*.log) to Bazel's undeclared test outputs, so that
// they outlive the test's sandbox (bazel-testlogs/.../test.outputs/outputs.zip).
void KeepLogs(const std::string& dir);


}  // namespace eonce::testing

#endif  // EONCE_TESTS_FAULTS_STACK_H_
