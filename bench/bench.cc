// eonce bench: what effectively-once costs, next to the physical limits of the same
// machine, measured in the same run.
//
// Every path is measured with a closed loop of N calls in flight (1, 16 and 64 by
// default): the loopback gRPC echo and synced RocksDB puts (the limits), the ledger called
// directly, first-seen commands and duplicates through the sidecar, the agent's Enqueue,
// and the whole pipeline's drain rate. Then duplicates against a sidecar holding a million
// records, each run paired with one against the same sidecar binary holding a small store,
// and that sidecar's memory and disk use after compaction. With the peers' servers running
// (./eonce bench --peers), first seen and duplicates in pairs with Postgres and Redis. End
// to end, from Enqueue to ACKED; and an idle sidecar's CPU. It prints a table with each
// figure's ratio to its physical limit, and writes bench/results/latest.json, a table and
// a PNG plot.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "bench/commands.h"
#include "bench/drain.h"
#include "bench/e2e.h"
#include "bench/echo.h"
#include "bench/idle.h"
#include "bench/in_process.h"
#include "bench/large.h"
#include "bench/loops.h"
#include "bench/peer_pairs.h"
#include "bench/plot.h"
#include "bench/report.h"
#include "bench/shards.h"
#include "common/base/clock.h"
#include "common/command/command.h"
#include "common/base/flags.h"
#include "common/base/log.h"
#include "common/base/random.h"
#include "common/store/rocks.h"
#include "common/rpc/server.h"
#include "dedupe_sidecar/doors/sidecar_service.h"
#include "eonce/ledger/v1/ledger.grpc.pb.h"
#include "eonce/v1/agent.grpc.pb.h"
#include "eonce/v1/sidecar.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/server_builder.h"
#include "outbox_agent/doors/agent_server.h"
#include "outbox_agent/client/client.h"
#include "outbox_agent/client/enqueue_batcher.h"
#include "services/ledger/ledger_service.h"

ABSL_FLAG(std::string, in_flight, "1,16,64", "calls in flight to measure at (the peers' client counts)");
ABSL_FLAG(double, seconds, 2.0, "how long each run of a measurement lasts");
ABSL_FLAG(std::string, only, "",
          "measure only these groups (comma-separated: limits, ledger, sidecar, in_process, "
          "shards, agent, e2e, large, idle, peers; first_seen and enqueue are the first rows "
          "of sidecar and agent alone, drain its last); "
          "for profiling one path with perf");
ABSL_FLAG(int32_t, runs, 3, "runs per measurement (the median is reported)");
ABSL_FLAG(double, warmup_seconds, 0.5, "the warm-up before each measurement");
ABSL_FLAG(int64_t, records, 1'000'000, "records for the sidecar memory and disk measurement");
ABSL_FLAG(int32_t, large_block_cache_mb, 256,
          "the block cache of the large-store measurement's sidecars, sized to a million "
          "records' data blocks (204 MiB) as docs/operations.md advises (0: their default)");
ABSL_FLAG(std::string, out_dir, "bench/results", "where the table, JSON and plot go");
ABSL_FLAG(bool, agent_batch_submits, true,
          "the agent sends its attempts as SubmitBatch calls (false: one Submit each, for A/B)");
ABSL_FLAG(int64_t, agent_idle_pump_ms, eonce::AgentServerOptions().idle_pump_ms,
          "how long the agent's loop sleeps when nothing wakes it (for A/B; the agent's default)");
ABSL_FLAG(int32_t, agent_max_round, eonce::ReplayerOptions().max_round,
          "attempts the agent claims and sends together per round (for A/B; the agent's "
          "default)");
ABSL_FLAG(int32_t, agent_max_in_flight, eonce::ReplayerOptions().max_in_flight,
          "attempts the agent keeps in flight while it drains (for A/B; the agent's default)");
ABSL_FLAG(int64_t, finished_cache_mb, eonce::FinishedAnswers::kDefaultMaxBytes >> 20,
          "the in-bench sidecar's memory of finished answers (for A/B; the sidecar's default)");
ABSL_FLAG(std::string, bin_dir, "bazel-bin",
          "where the built binaries are (for the memory and idle runs)");
ABSL_FLAG(std::string, peers_state, "",
          "the folder of the peers' running servers (`python3 bench/peers.py start --state "
          "DIR`; ./eonce bench --peers does it); empty: no peers");
ABSL_FLAG(std::string, peers_script, "bench/peers.py", "the script that measures the peers");
ABSL_FLAG(int32_t, peer_pairs, 5, "pairs of runs (a peer's, then eonce's) per peer figure");
ABSL_FLAG(double, idle_seconds, 10.0, "how long the idle sidecar's CPU is read over");

namespace eonce::bench {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string Address(int port) { return absl::StrCat("127.0.0.1:", port); }

int Run() {
  SetLogsEnabled(false);
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  std::vector<int> points;
  for (absl::string_view p : absl::StrSplit(absl::GetFlag(FLAGS_in_flight), ',')) {
    points.push_back(std::stoi(std::string(p)));
  }
  const double seconds = absl::GetFlag(FLAGS_seconds);
  const std::vector<std::string> only = absl::StrSplit(absl::GetFlag(FLAGS_only), ',',
                                                       absl::SkipEmpty());
  auto want = [&only](const char* group) {
    return only.empty() || std::find(only.begin(), only.end(), group) != only.end();
  };
  MeasureOptions measure;
  measure.seconds = seconds;
  measure.runs = absl::GetFlag(FLAGS_runs);
  measure.warmup_seconds = absl::GetFlag(FLAGS_warmup_seconds);
  char tmpl[] = "/tmp/eonce-bench-XXXXXX";
  std::string base = mkdtemp(tmpl);
  std::vector<Row> rows;
  auto add = [&](const std::string& path, int n, Figures f, const std::string& limit) {
    rows.push_back(Row{path, n, f, limit});
    std::printf("  %-28s %3d in flight  %9.0f ops/s  p50 %8.0f us  p99 %8.0f us  cpu %5.0f us/op"
                "  switches %5.1f/op  steal %3.0f%%%s\n",
                path.c_str(), n, f.ops_per_s, f.p50_us, f.p99_us, f.cpu_us_per_op,
                f.switches_per_op, f.steal_pct, f.errors ? absl::StrCat("  (", f.errors, " errors)").c_str() : "");
    std::fflush(stdout);
  };

  std::printf("eonce bench on %ld cores; each figure is the median of %d closed loops of "
              "%.1f s after a %.1f s warm-up; ledger direct, every first-seen path, sidecar "
              "duplicates and agent enqueue alternate each run with one of their limit (the "
              "first-seen paths with one of the ledger direct too), and their ratio is the "
              "median of those pairs\n",
              sysconf(_SC_NPROCESSORS_ONLN), measure.runs, seconds, measure.warmup_seconds);

  // --- physical limits -------------------------------------------------------------------
  EchoService echo;
  grpc::ServerBuilder builder;
  int echo_port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &echo_port);
  // The relay's second hop, as a sidecar's forwards to its business in the pod.
  const std::string echo_socket = absl::StrCat("unix:", base, "/echo.sock");
  builder.AddListeningPort(echo_socket, grpc::InsecureServerCredentials());
  builder.RegisterCallbackGenericService(&echo);
  auto echo_server = builder.BuildAndStart();
  auto echo_channel = grpc::CreateChannel(Address(echo_port), grpc::InsecureChannelCredentials());
  grpc::GenericStub echo_stub(echo_channel);
  std::string payload(120, 'x');  // about the size of a command
  const IssueFn echo_issue = EchoCalls(echo_stub, "/bench.Echo/Echo", payload);
  for (int n : want("limits") ? points : std::vector<int>()) {
    add("grpc echo (limit)", n, Measure(measure, n, echo_issue), "grpc echo (limit)");
  }
  // Two hops: a relay passes each call to the echo server over a unix socket, as a sidecar
  // passes a command to its business in the pod; what no two-hop path on this machine can
  // exceed.
  grpc::GenericStub echo_local_stub(
      grpc::CreateChannel(echo_socket, grpc::InsecureChannelCredentials()));
  RelayService relay(echo_local_stub);
  grpc::ServerBuilder relay_builder;
  int relay_port = 0;
  relay_builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &relay_port);
  relay_builder.RegisterCallbackGenericService(&relay);
  auto relay_server = relay_builder.BuildAndStart();
  grpc::GenericStub relay_stub(
      grpc::CreateChannel(Address(relay_port), grpc::InsecureChannelCredentials()));
  const IssueFn relay_issue = EchoCalls(relay_stub, "/bench.Relay/Echo", payload);
  for (int n : want("limits") ? points : std::vector<int>()) {
    add("grpc echo, two hops (limit)", n, Measure(measure, n, relay_issue),
        "grpc echo, two hops (limit)");
  }
  auto put_store = RocksStore::Open(base + "/puts", {}, StoreOptions());
  if (!put_store.ok()) return 1;
  const BlockingFn synced_put = [&](int64_t i) {
    return (*put_store)->db()->Put(SyncedWrite(), absl::StrCat("key", i), payload).ok();
  };
  for (int n : want("limits") ? points : std::vector<int>()) {
    add("synced put (limit)", n, MeasureBlocking(measure, n, synced_put), "synced put (limit)");
  }
  // The rows the targets compare with a limit are measured in pairs with it (a run of the
  // limit, then a run of the path): this VM's speed drifts by half within minutes.
  auto echo_run = [&](int n) -> LimitRunFn {
    return [&, n](int64_t first) { return ClosedLoop(n, measure.seconds, echo_issue, first); };
  };
  auto put_run = [&](int n) -> LimitRunFn {
    return [&, n](int64_t first) { return Threads(n, measure.seconds, synced_put, first); };
  };

  // --- the stack, in process, on loopback ports ------------------------------------------
  LedgerServerOptions ledger_options;
  ledger_options.data_dir = base + "/ledger";
  // As deploy/base/ledger.yaml runs it, the sidecar reaches the ledger on the pod's unix
  // socket; the ledger's port serves the rows that call it directly, over loopback TCP
  // like every caller from another pod (and like echo).
  ledger_options.sidecar_socket = absl::StrCat("unix:", base, "/ledger.sock");
  auto ledger = LedgerServer::Start(ledger_options, RealClock::Get());
  SidecarServerOptions sidecar_options;
  sidecar_options.data_dir = base + "/sidecar";
  sidecar_options.upstream_address = ledger_options.sidecar_socket;
  sidecar_options.finished_cache_bytes =
      static_cast<size_t>(absl::GetFlag(FLAGS_finished_cache_mb)) << 20;
  auto sidecar = SidecarServer::Start(sidecar_options, RealClock::Get());
  AgentServerOptions agent_options;
  agent_options.data_dir = base + "/agent";
  // As deploy/base/producer.yaml runs it: the producer reaches its agent on the pod's unix
  // socket.
  agent_options.listen_address = absl::StrCat("unix:", base, "/agent.sock");
  agent_options.tenant = "bench";
  agent_options.default_sidecar = Address((*sidecar)->port());
  agent_options.idle_pump_ms = absl::GetFlag(FLAGS_agent_idle_pump_ms);
  agent_options.replay.max_in_flight = absl::GetFlag(FLAGS_agent_max_in_flight);
  agent_options.replay.max_round = absl::GetFlag(FLAGS_agent_max_round);
  agent_options.batch_submits = absl::GetFlag(FLAGS_agent_batch_submits);
  auto agent = AgentServer::Start(agent_options, RealClock::Get(), RealRandom::Get());
  if (!ledger.ok() || !sidecar.ok() || !agent.ok()) {
    std::fprintf(stderr, "bench: the stack did not start\n");
    return 1;
  }
  constexpr int kAccounts = 1000;
  auto ledger_stub = ledger::v1::Ledger::NewStub(
      grpc::CreateChannel(Address((*ledger)->port()), grpc::InsecureChannelCredentials()));
  for (int a = 0; a < kAccounts; ++a) {
    grpc::ClientContext context;
    context.AddMetadata(kComponentHeader, "bench");  // a business port admits components
    context.AddMetadata(kCommandIdHeader, absl::StrCat("open-", a));
    // The tenant whose commands move it, as a producer's own account is opened: an account
    // that names no tenant (one opened before accounts named theirs) is read from the
    // store on every call, not from the ledger's memory.
    context.AddMetadata(kTenantHeader, "bench");
    ledger::v1::OpenAccountRequest open;
    open.set_id(absl::StrCat("a", a));
    open.set_initial_balance(LedgerCore::kMaxAmount);
    ledger::v1::Account account;
    ledger_stub->OpenAccount(&context, open, &account);
  }

  // A transfer called directly on the ledger, its command id `prefix` and its number.
  auto ledger_issue = [&](std::string prefix) -> IssueFn {
    return [&, prefix](int64_t i, std::function<void(bool)> done) {
      TransferAsync(*ledger_stub, absl::StrCat(prefix, i), kAccounts, i, std::move(done));
    };
  };
  for (int n : want("ledger") ? points : std::vector<int>()) {
    add("ledger direct", n,
        MeasurePaired(measure, n, ledger_issue(absl::StrCat("direct-", n, "-")), echo_run(n)),
        "grpc echo (limit)");
  }
  // The first-seen rows' reference: a run of the ledger called directly in each of their
  // pairs, for their "of the ledger" target. Each reference row sends command ids of its
  // own, so that none is a duplicate of an earlier one.
  int reference_rows = 0;
  auto ledger_run = [&](int n) -> LimitRunFn {
    IssueFn issue = ledger_issue(absl::StrCat("reference-", ++reference_rows, "-", n, "-"));
    return [n, issue, &measure](int64_t first) {
      return ClosedLoop(n, measure.seconds, issue, first);
    };
  };
  auto sidecar_stub = v1::Sidecar::NewStub(
      grpc::CreateChannel(Address((*sidecar)->port()), grpc::InsecureChannelCredentials()));
  std::map<int, int64_t> first_seen_count;
  auto submit = [&](const v1::Command& command, std::function<void(bool)> done) {
    SubmitAsync(*sidecar_stub, command, v1::APPLIED, std::move(done));
  };
  for (int n : want("sidecar") || want("first_seen") ? points : std::vector<int>()) {
    // The duplicates below replay the commands of this warm-up (numbers 0 .. count-1).
    Figures f = MeasurePaired(measure, n, [&, n](int64_t i, std::function<void(bool)> done) {
      submit(TransferCommand(absl::StrCat("fs-", n, "-", i), kAccounts, i), done);
    }, echo_run(n), &first_seen_count[n], ledger_run(n));
    add("sidecar first-seen", n, f, "grpc echo (limit)");
  }
  // The duplicates at the most calls in flight answered from the memory of finished
  // answers, and all of that phase's lookups.
  int64_t dup_memory_hits = 0, dup_lookups = 0;
  const FinishedAnswers& answers = (*sidecar)->records().finished_answers();
  for (int n : want("sidecar") ? points : std::vector<int>()) {
    // A duplicate is a retry: its client resends the request it built and hashed for the
    // first attempt (built here, before the clock starts), as the echo's client sends
    // bytes it holds.
    const int64_t known = std::max<int64_t>(1, first_seen_count[n]);
    std::vector<v1::SubmitRequest> sent(static_cast<size_t>(known));
    for (int64_t j = 0; j < known; ++j) {
      *sent[j].mutable_command() = TransferCommand(absl::StrCat("fs-", n, "-", j), kAccounts, j);
    }
    const int64_t hits_before = answers.hits(), misses_before = answers.misses();
    const IssueFn resend = [&](int64_t i, std::function<void(bool)> done) {
      ResendAsync(*sidecar_stub, sent[i % known], v1::REPLAYED, std::move(done));
    };
    add("sidecar duplicate", n, MeasurePaired(measure, n, resend, echo_run(n)),
        "grpc echo (limit)");
    dup_memory_hits = answers.hits() - hits_before;
    dup_lookups = dup_memory_hits + answers.misses() - misses_before;
  }

  // The peers (bench/peers.py's servers), each of their runs paired with one of first seen
  // or of duplicates through this sidecar.
  std::vector<PeerPair> peer_pairs;
  if (want("peers") && !absl::GetFlag(FLAGS_peers_state).empty()) {
    const PeerRunner peers(absl::GetFlag(FLAGS_peers_script), absl::GetFlag(FLAGS_peers_state));
    if (absl::Status ran = BenchPeers(measure, points, absl::GetFlag(FLAGS_peer_pairs),
                                      *sidecar_stub, kAccounts, peers, &peer_pairs);
        !ran.ok()) {
      std::fprintf(stderr, "bench: the peers did not run: %s\n", ran.ToString().c_str());
      return 1;
    }
    std::printf("%s", PeerPairsText(peer_pairs).c_str());
  }

  // The same commands sent as SubmitBatch calls by a batching client (two calls in
  // flight; the commands that arrive meanwhile share the next).
  if (want("sidecar")) {
    BatchedSubmitter batched(*sidecar_stub);
    add("first-seen, batched", 64,
        MeasurePaired(measure, 64, [&](int64_t i, std::function<void(bool)> done) {
          batched.Submit(TransferCommand(absl::StrCat("batch-", i), kAccounts, i), v1::APPLIED,
                         std::move(done));
        }, echo_run(64), nullptr, ledger_run(64)), "grpc echo (limit)");
  }

  // The same path with the sidecar as the commit point (--business_commit_point=false):
  // its started record and outcome synced on the path, as for a legacy business. The
  // difference is what moving the commit point to the business's inbox buys.
  if (want("sidecar")) {
    SidecarServerOptions synced_options = sidecar_options;
    synced_options.data_dir = base + "/sidecar-synced";
    synced_options.deduper.business_commit_point = false;
    auto synced = SidecarServer::Start(synced_options, RealClock::Get());
    if (!synced.ok()) return 1;
    auto synced_stub = v1::Sidecar::NewStub(
        grpc::CreateChannel(Address((*synced)->port()), grpc::InsecureChannelCredentials()));
    for (int n : {1, 64}) {
      add("first-seen, sidecar syncs", n,
          Measure(measure, n, [&, n](int64_t i, std::function<void(bool)> done) {
            SubmitAsync(*synced_stub,
                        TransferCommand(absl::StrCat("sync-", n, "-", i), kAccounts, i),
                        v1::APPLIED, std::move(done));
          }), "grpc echo (limit)");
    }
    (*synced)->Shutdown(1000).IgnoreError();
  }

  // The sidecar in the ledger's own process: one gRPC hop per command instead of two.
  if (want("sidecar") || want("in_process")) {
    std::vector<std::pair<int, Figures>> in_process, in_process_batched;
    if (absl::Status ran = BenchInProcess(measure, points, {64}, base + "/in-process", kAccounts,
                                          echo_run, ledger_run, &in_process, &in_process_batched);
        !ran.ok()) {
      std::fprintf(stderr, "bench: the in-process sidecar did not run: %s\n",
                   ran.ToString().c_str());
      return 1;
    }
    for (const auto& [n, f] : in_process) add("first-seen, in process", n, f, "grpc echo (limit)");
    for (const auto& [n, f] : in_process_batched) {
      add("first-seen, in process, batched", n, f, "grpc echo (limit)");
    }
  }

  // How many first-seen forwards went out before the sidecar's own sync (the ledger's
  // inbox is the commit point: docs/design.md).
  const int64_t forwards = (*sidecar)->deduper().stats().forwards.load();
  const int64_t forwards_before_sync = (*sidecar)->deduper().stats().forwards_before_sync.load();

  // Enqueue alone: the credential is revoked, so nothing is replayed meanwhile.
  auto agent_stub = v1::Agent::NewStub(
      grpc::CreateChannel(agent_options.listen_address, grpc::InsecureChannelCredentials()));
  (*agent)->credential().Set(1, true).IgnoreError();
  for (int n : want("agent") || want("enqueue") ? points : std::vector<int>()) {
    Figures f = MeasurePaired(measure, n, [&, n](int64_t i, std::function<void(bool)> done) {
      struct Call {
        grpc::ClientContext context;
        v1::EnqueueRequest request;
        v1::EnqueueResponse response;
      };
      auto call = std::make_shared<Call>();
      v1::Command c = TransferCommand(absl::StrCat("enq-", n, "-", i), kAccounts, i);
      c.clear_idempotency_key();
      c.clear_payload_hash();
      *call->request.mutable_command() = c;
      agent_stub->async()->Enqueue(&call->context, &call->request, &call->response,
                                   [call, done](grpc::Status s) { done(s.ok()); });
    }, put_run(n));
    add("agent enqueue", n, f, "synced put (limit)");
  }
  // The same through EnqueueBatch calls, as a producer with many commands in flight sends
  // them (outbox_agent/client/enqueue_batcher.h; two calls in flight, as the batched submits).
  if (want("agent") || want("enqueue")) {
    EnqueueBatcher::Options options = EnqueueBatcher::DefaultOptions();
    options.max_calls = 2;
    EnqueueBatcher batcher(options, *agent_stub, RealClock::Get());
    Figures f = MeasurePaired(measure, 64, [&](int64_t i, std::function<void(bool)> done) {
      v1::Command c = TransferCommand(absl::StrCat("enq-batched-", i), kAccounts, i);
      c.clear_idempotency_key();
      c.clear_payload_hash();
      batcher.Enqueue(std::move(c), /*deadline_ms=*/0,
                      [done](EnqueueBatcher::Answer answer) { done(answer.ok()); });
    }, put_run(64));
    add("agent enqueue, batched", 64, f, "synced put (limit)");
  }
  // The blocking client's Enqueue from 64 producer threads, as a service calls it from its
  // request threads: the calls that overlap share EnqueueBatch calls (AgentClient).
  if (want("agent") || want("enqueue")) {
    auto client = AgentClient::Connect(agent_options.listen_address);
    Figures f = MeasureBlocking(measure, 64, [&](int64_t i) {
      v1::Command c = TransferCommand(absl::StrCat("enq-client-", i), kAccounts, i);
      c.clear_idempotency_key();
      c.clear_payload_hash();
      return client->Enqueue(c).ok();
    }, put_run(64));
    add("agent enqueue, client", 64, f, "synced put (limit)");
  }

  // Drain alone: fill the outbox first (unmeasured), as the agent rows above do.
  if (want("drain") && !want("agent")) FillOutbox(*agent_stub, measure, kAccounts);
  if (want("agent") || want("drain")) {
    add("pipeline drain", agent_options.replay.max_in_flight,
        MeasureDrain(**agent, *sidecar_stub, measure, kAccounts), "first-seen, batched");
  }

  // End to end, after the drain: at 1 in flight, and offered at half the drain's rate.
  EndToEndFigures e2e;
  if (want("e2e")) {
    if (!want("agent")) (*agent)->credential().Set(3, false).IgnoreError();
    double drain_per_s = 0;
    for (const Row& r : rows) {
      if (r.path == "pipeline drain") drain_per_s = r.figures.ops_per_s;
    }
    if (absl::Status ran = BenchEndToEnd(agent_options.listen_address,
                                         Address((*ledger)->port()), kAccounts,
                                         seconds * measure.runs, drain_per_s / 2, &e2e);
        !ran.ok()) {
      std::fprintf(stderr, "bench: end to end did not run: %s\n", ran.ToString().c_str());
      return 1;
    }
  }
  // Sharded: first-seen through 1, 2 and 4 shards (one ledger behind them all), and the
  // pause of a run of slots while it moves. Last, after the drain and end to end: once
  // its slots have moved, nothing the agent sends through the unsharded sidecar to the
  // same ledger is acknowledged any more (a drain measured after it acknowledged none).
  ShardFigures sharded;
  if (want("shards")) {
    if (!BenchShards(measure, (*ledger)->port(), base + "/sharded", kAccounts, &sharded)) {
      std::fprintf(stderr, "bench: the sharded stacks did not run\n");
      return 1;
    }
    for (const auto& [shards, f] : sharded.first_seen) {
      add(absl::StrCat("first-seen, ", shards, shards == 1 ? " shard" : " shards"),
          sharded.in_flight, f, "grpc echo (limit)");
    }
  }

  agent->reset();
  sidecar->reset();
  ledger->reset();

  // --- the sidecar with a million records ------------------------------------------------
  LargeStoreFigures large;
  const int large_cache_mb = absl::GetFlag(FLAGS_large_block_cache_mb);
  if (want("large") && absl::GetFlag(FLAGS_records) > 0) {
    if (absl::Status ran = BenchLargeStore(measure, absl::GetFlag(FLAGS_bin_dir), base + "/memory",
                                           absl::GetFlag(FLAGS_records), kAccounts,
                                           large_cache_mb, &large);
        !ran.ok()) {
      std::fprintf(stderr, "bench: the large store did not run: %s\n", ran.ToString().c_str());
      return 1;
    }
    add("sidecar dup, small store", 64, large.small, "grpc echo (limit)");
    add("sidecar dup, 1M records", 64, large.large, "sidecar dup, small store");
  }
  IdleFigures idle;
  if (want("idle")) {
    if (absl::Status ran = BenchIdleSidecar(absl::GetFlag(FLAGS_bin_dir), base + "/idle",
                                            /*settle_seconds=*/1, absl::GetFlag(FLAGS_idle_seconds),
                                            &idle);
        !ran.ok()) {
      std::fprintf(stderr, "bench: the idle sidecar did not run: %s\n", ran.ToString().c_str());
      return 1;
    }
  }
  const int64_t records = large.records, raw_bytes = large.raw_bytes;
  const int64_t sst_bytes = large.sst_bytes, rss_kb = large.rss_kb;
  const std::string large_cache =
      large_cache_mb > 0 ? absl::StrCat(large_cache_mb, " MiB") : std::string("the default");

  // --- report ------------------------------------------------------------------------------
  std::string out_dir = absl::GetFlag(FLAGS_out_dir);
  fs::create_directories(out_dir);
  std::string table = RowsTable(rows);
  std::string json = "{\n  \"machine\": {\"cores\": " +
                     std::to_string(sysconf(_SC_NPROCESSORS_ONLN)) + "},\n  \"rows\": [\n" +
                     RowsJson(rows);
  // Added latency at 1 in flight: a first seen's p50 through the sidecar (two hops, and
  // with the sidecar in the ledger's process) minus the ledger's p50.
  double added_p50 = 0, added_in_process_p50 = 0, budget_p50 = 0, put_p50 = 0, relay_p50 = 0;
  for (const Row& r : rows) {
    if (r.in_flight != 1) continue;
    if (r.path == "sidecar first-seen") added_p50 += r.figures.p50_us;
    if (r.path == "first-seen, in process") added_in_process_p50 += r.figures.p50_us;
    if (r.path == "ledger direct") {
      added_p50 -= r.figures.p50_us;
      added_in_process_p50 -= r.figures.p50_us;
    }
    if (r.path == "grpc echo (limit)" || r.path == "synced put (limit)") budget_p50 += r.figures.p50_us;
    if (r.path == "synced put (limit)") put_p50 = r.figures.p50_us;
    if (r.path == "grpc echo, two hops (limit)") relay_p50 = r.figures.p50_us;
  }
  const double e2e_budget_us = EndToEndBudgetUs(put_p50, relay_p50);
  // (The peers' table is targets.py's, from latest.json.)
  absl::StrAppend(&table, EndToEndText(e2e, e2e_budget_us), IdleText(idle));
  absl::StrAppend(&table, absl::StrFormat(
      "\nadded p50 at 1 in flight: %.0f us through the sidecar, %.0f us with the sidecar in the "
      "ledger's process (budget: echo + synced put = %.0f us)\n",
      added_p50, added_in_process_p50, budget_p50));
  absl::StrAppend(&table, absl::StrFormat(
      "sidecar forwards before its own sync (the ledger's inbox is the commit point): %d of %d\n",
      forwards_before_sync, forwards));
  absl::StrAppend(&table, absl::StrFormat(
      "sidecar duplicates at %d in flight answered from memory (%d MiB): %d of %d lookups\n",
      points.empty() ? 0 : points.back(), absl::GetFlag(FLAGS_finished_cache_mb),
      dup_memory_hits, dup_lookups));
  if (sharded.moving_commands > 0) {
    absl::StrAppend(&table, absl::StrFormat(
        "all %d slots moved between two shards through etcd, %d runs (%d records copied): "
        "longest freeze %d ms; the %d commands on a moving run waited p50 %.1f ms, "
        "p99 %.1f ms (target <= 100 ms: %s), max %.1f ms; %d lost\n",
        sharded.moved_slots, sharded.runs, sharded.copied, sharded.frozen_ms,
        sharded.moving_commands, sharded.pause_p50_ms, sharded.pause_p99_ms,
        sharded.pause_p99_ms <= 100 ? "met" : "missed", sharded.pause_max_ms, sharded.lost));
  }
  absl::StrAppend(&table, absl::StrFormat(
      "sidecar with %d records (block cache %s): RSS %.1f MiB; SST %.1f MiB for %.1f MiB of "
      "key + hash + response (%.2fx)\n", records, large_cache, rss_kb / 1024.0,
      sst_bytes / 1048576.0, raw_bytes / 1048576.0,
      raw_bytes > 0 ? static_cast<double>(sst_bytes) / raw_bytes : 0));
  absl::StrAppend(&json, absl::StrFormat(
      "  ],\n  \"added_p50_us_at_1\": %.1f,\n  \"added_p50_in_process_us_at_1\": %.1f,\n"
      "  \"added_p50_budget_us\": %.1f,\n"
      "  \"sidecar_forwards\": %d,\n  \"sidecar_forwards_before_sync\": %d,\n"
      "  \"duplicate_memory_hits\": %d,\n  \"duplicate_lookups\": %d,\n"
      "  \"sidecar_records\": %d,\n  \"sidecar_block_cache_mb\": %d,\n"
      "  \"sidecar_rss_mib\": %.1f,\n  \"sidecar_sst_bytes\": %d,\n"
      "  \"raw_key_hash_response_bytes\": %d,\n  \"disk_ratio\": %.3f,\n"
      "  \"peer_pairs\": %s,\n  \"e2e\": %s,\n  \"idle\": %s,\n"
      "  \"move\": {\"slots\": %d, \"runs\": %d, \"copied\": %d, \"frozen_ms\": %d, \"commands\": %d, "
      "\"pause_p50_ms\": %.1f, \"pause_p99_ms\": %.1f, \"pause_max_ms\": %.1f, \"lost\": %d}\n}\n",
      added_p50, added_in_process_p50, budget_p50, forwards, forwards_before_sync,
      dup_memory_hits, dup_lookups,
      records, large_cache_mb,
      rss_kb / 1024.0,
      sst_bytes, raw_bytes,
      raw_bytes > 0 ? static_cast<double>(sst_bytes) / raw_bytes : 0,
      PeerPairsJson(peer_pairs), EndToEndJson(e2e, e2e_budget_us), IdleJson(idle),
      sharded.moved_slots, sharded.runs, sharded.copied, sharded.frozen_ms, sharded.moving_commands, sharded.pause_p50_ms,
      sharded.pause_p99_ms, sharded.pause_max_ms, sharded.lost));
  std::printf("\n%s", table.c_str());
  std::ofstream(out_dir + "/latest.json") << json;
  std::ofstream(out_dir + "/latest.txt") << table;

  if (WritePlot(rows, RatiosToLimit(rows), PeerBarsOf(peer_pairs), out_dir)) std::printf("plot: %s/latest.png\n", out_dir.c_str());
  std::printf("figures: %s/latest.json\n", out_dir.c_str());
  std::error_code ignored;
  fs::remove_all(base, ignored);
  return 0;
}

}  // namespace
}  // namespace eonce::bench

int main(int argc, char** argv) {
  eonce::ParseFlags(argc, argv, {"bench [--out_dir=DIR]: eonce's throughput and latency on this machine"});
  return eonce::bench::Run();
}
