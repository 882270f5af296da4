// The demo's stack: the ledger and the case service (inbox mode), a legacy ledger, a
// dedupe sidecar in front of each, and the outbox agent, each a child process on a
// loopback port with its data under one folder. With `shards` > 1 the ledger is that many
// shards s0..s(N-1), each a ledger of its own (`ledger` is s0's; --cross_slot_credits), its
// sidecar (`sidecar` is s0's; --move_business_data) taking the slots the slot map gives
// it, and a relay agent sending its credits to other shards; the agent routes ledger
// commands by slot. The slot map and the shards' leases are in one etcd member the stack
// runs on loopback (`etcd`), with its data in the run's folder.
#ifndef EONCE_TOOLS_DEMO_DEMO_STACK_H_
#define EONCE_TOOLS_DEMO_DEMO_STACK_H_

#include <signal.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tests/util/process.h"
#include "tools/demo/local_etcd.h"
#include "tools/demo/shards.h"

namespace eonce::demo {

struct Stack {
  std::string data;
  std::string bin;
  int shards = 1;
  std::unique_ptr<Process> ledger, cases, legacy, sidecar, case_sidecar, legacy_sidecar, agent;
  std::vector<std::unique_ptr<Process>> more_shards;   // sidecars of s1 .. s(N-1)
  std::vector<std::unique_ptr<Process>> more_ledgers;  // ledgers of s1 .. s(N-1)
  std::vector<std::unique_ptr<Process>> relays;        // relay agents of s0 .. s(N-1)
  std::unique_ptr<LocalEtcd> etcd;  // sharded only
  std::string sidecar_port;
  std::string lose_ratio = "0";

  // The ledger of every shard, s0 first.
  std::vector<Process*> Ledgers() const {
    std::vector<Process*> all = {ledger.get()};
    for (const auto& l : more_ledgers) all.push_back(l.get());
    return all;
  }

  // The flags that reach the slot map in the demo's etcd (sharded only).
  std::vector<std::string> EtcdFlags() const {
    return {"--etcd_endpoints=" + etcd->endpoint(), std::string("--etcd_prefix=") + kDemoEtcdPrefix};
  }

  // The ledger's sidecars, s0 first.
  std::vector<Process*> LedgerSidecars() const {
    std::vector<Process*> all = {sidecar.get()};
    for (const auto& shard : more_shards) all.push_back(shard.get());
    return all;
  }

  // `shard` >= 0: the ledger's shard s<shard>.
  absl::StatusOr<std::unique_ptr<Process>> StartSidecar(const std::string& name,
                                                        const std::string& upstream,
                                                        const std::string& listen,
                                                        int shard = -1) {
    std::vector<std::string> args = {"--listen=" + listen, "--upstream=" + upstream,
                                     "--data_dir=" + data + "/" + name, "--lease_ms=2500",
                                     "--forward_timeout_ms=1000", "--outcome_query_timeout_ms=1000",
                                     "--instance_id=" + name};
    if (shard >= 0) {
      args.push_back(absl::StrCat("--shard_id=s", shard));
      for (const std::string& flag : EtcdFlags()) args.push_back(flag);
      // Short, so that a sidecar killed in the demo gives its shard back within seconds.
      args.push_back("--lease_ttl_ms=3000");
      args.push_back("--move_business_data");
    }
    return Process::Start(bin + "/dedupe_sidecar/dedupe_sidecar", args,
                          data + "/" + name + ".log");
  }

  // The ledger's sidecars: one, or `shards` of them under a map that names where each
  // listens (known once they listen: they start under placeholders, then read the real
  // addresses from etcd).
  absl::Status StartLedgerSidecars() {
    const bool sharded = shards > 1;
    uint64_t placeholders = 0;
    if (sharded) {
      auto started = LocalEtcd::Start(data);
      if (!started.ok()) return started.status();
      etcd = std::move(*started);
      auto written = WriteEvenSlotMap(etcd->store(), 0,
                                      std::vector<std::string>(shards, "pending:1"));
      if (!written.ok()) return written.status();
      placeholders = written->epoch();
    }
    auto s = StartSidecar("sidecar", ledger->address(), "127.0.0.1:0", sharded ? 0 : -1);
    if (!s.ok()) return s.status();
    sidecar = std::move(*s);
    sidecar_port = sidecar->address().substr(sidecar->address().rfind(':') + 1);
    if (!sharded) return absl::OkStatus();
    for (int i = 1; i < shards; ++i) {
      auto own = StartLedger(absl::StrCat("ledger-s", i), 13 + i);
      if (!own.ok()) return own.status();
      more_ledgers.push_back(std::move(*own));
      auto shard = StartSidecar(absl::StrCat("sidecar-s", i), more_ledgers.back()->address(),
                                "127.0.0.1:0", i);
      if (!shard.ok()) return shard.status();
      more_shards.push_back(std::move(*shard));
    }
    std::vector<std::string> addresses;
    for (Process* p : LedgerSidecars()) addresses.push_back(p->address());
    auto written = WriteEvenSlotMap(etcd->store(), placeholders, addresses);
    if (!written.ok()) return written.status();
    for (Process* p : LedgerSidecars()) {
      absl::Status adopted = AwaitSlotMap(p->address(), written->epoch(), 10'000);
      if (!adopted.ok()) return adopted;
    }
    // Each shard's relay: its ledger's credits to accounts on other shards.
    for (int i = 0; i < shards; ++i) {
      auto relay = Process::Start(
          bin + "/outbox_agent/outbox_agent",
          {"--listen=127.0.0.1:0", absl::StrCat("--data_dir=", data, "/relay-s", i),
           "--tenant=acme", "--sidecar=" + sidecar->address(),
           "--routes=eonce.ledger.v1.Ledger=sharded:" + sidecar->address(),
           "--relay_from=" + Ledgers()[i]->address(), "--max_backoff_ms=500",
           "--base_backoff_ms=20", "--submit_timeout_ms=2000", "--claim_ttl_ms=4500",
           "--max_age_ms=3600000"},
          absl::StrCat(data, "/relay-s", i, ".log"));
      if (!relay.ok()) return relay.status();
      relays.push_back(std::move(*relay));
    }
    return absl::OkStatus();
  }

  // A ledger in inbox mode that loses `lose_ratio` of its answers after applying.
  absl::StatusOr<std::unique_ptr<Process>> StartLedger(const std::string& name, int seed) {
    std::vector<std::string> args = {"--listen=127.0.0.1:0", "--data_dir=" + data + "/" + name,
                                     "--lose_answer_ratio=" + lose_ratio,
                                     absl::StrCat("--fault_seed=", seed)};
    if (shards > 1) args.push_back("--cross_slot_credits");
    return Process::Start(bin + "/services/ledger/ledger_service", args,
                          data + "/" + name + ".log");
  }

  absl::Status Start(bool faults) {
    std::string lose = faults ? "0.03" : "0";
    lose_ratio = lose;
    auto l = StartLedger("ledger", 7);
    if (!l.ok()) return l.status();
    ledger = std::move(*l);
    auto cs = Process::Start(bin + "/services/case/case_service",
                             {"--listen=127.0.0.1:0", "--data_dir=" + data + "/cases",
                              "--lose_answer_ratio=" + lose, "--fault_seed=9"},
                             data + "/cases.log");
    if (!cs.ok()) return cs.status();
    cases = std::move(*cs);
    auto lg = Process::Start(bin + "/services/ledger/ledger_service",
                             {"--listen=127.0.0.1:0", "--data_dir=" + data + "/legacy",
                              "--legacy", "--lose_answer_ratio=" + std::string(faults ? "0.3" : "0"),
                              "--fault_seed=11"},
                             data + "/legacy.log");
    if (!lg.ok()) return lg.status();
    legacy = std::move(*lg);
    if (absl::Status started = StartLedgerSidecars(); !started.ok()) return started;
    auto css = StartSidecar("case_sidecar", cases->address(), "127.0.0.1:0");
    if (!css.ok()) return css.status();
    case_sidecar = std::move(*css);
    auto ls = StartSidecar("legacy_sidecar", legacy->address(), "127.0.0.1:0");
    if (!ls.ok()) return ls.status();
    legacy_sidecar = std::move(*ls);
    auto a = Process::Start(bin + "/outbox_agent/outbox_agent",
                            {"--listen=127.0.0.1:0", "--data_dir=" + data + "/agent",
                             "--tenant=acme", "--sidecar=" + sidecar->address(),
                             "--routes=eonce.case_mgmt.v1.Cases=" + case_sidecar->address() +
                                 (shards > 1 ? ",eonce.ledger.v1.Ledger=sharded:" +
                                                   sidecar->address()
                                             : ""),
                             "--max_backoff_ms=500", "--base_backoff_ms=20",
                             "--submit_timeout_ms=2000", "--claim_ttl_ms=4500",
                             "--max_age_ms=3600000"},
                            data + "/agent.log");
    if (!a.ok()) return a.status();
    agent = std::move(*a);
    return absl::OkStatus();
  }

  // kill -9, then start again on the same port with the same data.
  absl::Status RestartSidecar() {
    sidecar->Signal(SIGKILL, true);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    for (int i = 0; i < 50; ++i) {
      auto s = StartSidecar("sidecar", ledger->address(), "127.0.0.1:" + sidecar_port,
                            shards > 1 ? 0 : -1);
      if (s.ok()) {
        sidecar = std::move(*s);
        return absl::OkStatus();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return absl::UnavailableError("the sidecar did not come back");
  }

  void StopAll() {
    for (auto* p : {&agent, &sidecar, &case_sidecar, &legacy_sidecar, &ledger, &cases, &legacy}) {
      if (*p != nullptr) (*p)->Signal(SIGTERM, true);
    }
    for (auto* group : {&relays, &more_shards, &more_ledgers}) {
      for (auto& p : *group) p->Signal(SIGTERM, true);
    }
    etcd.reset();  // last: the sidecars give their leases back on the way out
  }
};

}  // namespace eonce::demo

#endif  // EONCE_TOOLS_DEMO_DEMO_STACK_H_
