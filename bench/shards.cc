#include "bench/shards.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "bench/commands.h"
#include "common/base/clock.h"
#include "common/rpc/grpc_status.h"
#include "common/coord/memory_map_store.h"
#include "common/coord/slots.h"
#include "common/base/status.h"
#include "dedupe_sidecar/doors/sidecar_service.h"
#include "eonce/v1/sidecar.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "tools/reshard/grpc_shard_admin.h"
#include "tools/demo/local_etcd.h"
#include "tools/reshard/mover.h"

namespace eonce::bench {
namespace {

using SteadyClock = std::chrono::steady_clock;
constexpr char kTenant[] = "bench";

// N sharded sidecars in front of one ledger, with the slot map that names them: in the
// in-memory coordination store for the throughput figures, and in a local etcd member for
// the move (which a user's move goes through).
struct ShardedStack {
  MemoryMapStore memory{RealClock::Get()};
  MapStore* store = &memory;
  std::string etcd_endpoint;  // sidecars on etcd when set (store is then etcd's)
  std::vector<std::unique_ptr<ShardLease>> leases;
  std::vector<std::unique_ptr<SidecarServer>> sidecars;
  std::vector<std::unique_ptr<v1::Sidecar::Stub>> stubs;
  std::vector<std::string> ids;

  ~ShardedStack() {
    for (auto& sidecar : sidecars) sidecar->Shutdown(1000).IgnoreError();
  }

  // `all_on_first`: the first shard owns every slot (the others none), so that every slot
  // can move.
  bool Start(int shards, int ledger_port, const std::string& dir, bool all_on_first = false) {
    std::error_code error;
    std::filesystem::create_directories(dir, error);
    std::vector<v1::ShardInfo> infos(shards);
    for (int i = 0; i < shards; ++i) {
      ids.push_back(absl::StrCat("s", i));
      infos[i].set_id(ids.back());
      infos[i].set_address("pending:1");
    }
    auto layout = [&]() -> absl::StatusOr<SlotMap> {
      if (!all_on_first) return SlotMap::Even(infos);
      v1::SlotMap proto;
      proto.set_epoch(1);
      proto.set_slot_count(kSlotCount);
      for (const v1::ShardInfo& info : infos) *proto.add_shards() = info;
      v1::SlotRange* all = proto.add_ranges();
      all->set_first(0);
      all->set_last(kSlotCount - 1);
      all->set_shard(infos[0].id());
      return SlotMap::FromProto(std::move(proto));
    };
    absl::StatusOr<SlotMap> seed = layout();
    if (!seed.ok()) {
      std::fprintf(stderr, "bench: %s\n", seed.status().ToString().c_str());
      return false;
    }
    absl::StatusOr<SlotMap> first = store->CompareAndSwap(0, *seed);
    if (!first.ok()) return false;
    for (int i = 0; i < shards; ++i) {
      SidecarServerOptions options;
      options.data_dir = absl::StrCat(dir, "/s", i);
      options.upstream_address = absl::StrCat("127.0.0.1:", ledger_port);
      options.shard_id = ids[i];
      if (etcd_endpoint.empty()) {
        leases.push_back(memory.NewLease(MemoryLeaseOptions{60'000, 1'000}));
        options.map_store = &memory;
        options.shard_lease = leases.back().get();
      } else {
        options.etcd_endpoints = etcd_endpoint;
        options.etcd_prefix = demo::kDemoEtcdPrefix;
      }
      auto sidecar = SidecarServer::Start(options, RealClock::Get());
      if (!sidecar.ok()) return false;
      infos[i].set_address(absl::StrCat("127.0.0.1:", (*sidecar)->port()));
      stubs.push_back(v1::Sidecar::NewStub(
          grpc::CreateChannel(infos[i].address(), grpc::InsecureChannelCredentials())));
      sidecars.push_back(std::move(*sidecar));
    }
    absl::StatusOr<SlotMap> map = store->CompareAndSwap(first->epoch(), *layout());
    if (!map.ok()) return false;
    for (auto& sidecar : sidecars) {
      if (!sidecar->AwaitShardServing(map->epoch(), absl::Seconds(30))) return false;
    }
    return true;
  }

  // The shard that owns the command's slot in the newest map a shard holds.
  int OwnerOf(const v1::Command& command) const {
    std::shared_ptr<const SlotMap> map = sidecars[0]->shards()->map();
    for (const auto& sidecar : sidecars) {
      auto held = sidecar->shards()->map();
      if (held->epoch() > map->epoch()) map = held;
    }
    const std::string& owner =
        map->OwnerOf(SlotOf(kTenant, command.entity().type(), command.entity().id()));
    return static_cast<int>(std::find(ids.begin(), ids.end(), owner) - ids.begin());
  }
};


// A command on the moving run, sent until it is answered: refusals are retried after
// 2 ms, at the shard the refusal names. Returns its time in ms, or -1 if it ran out of
// its 30 s.
double SubmitThroughAMove(ShardedStack& stack, const v1::Command& command) {
  const auto start = SteadyClock::now();
  int shard = stack.OwnerOf(command);
  while (SteadyClock::now() - start < std::chrono::seconds(30)) {
    grpc::ClientContext context;
    context.AddMetadata(kTenantHeader, kTenant);
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::SubmitRequest request;
    *request.mutable_command() = command;
    v1::SubmitResponse response;
    grpc::Status status = stack.stubs[shard]->Submit(&context, request, &response);
    if (status.ok()) {
      return std::chrono::duration<double, std::milli>(SteadyClock::now() - start).count();
    }
    absl::Status refused = FromGrpcStatus(status, &context);
    std::string owner = ErrorMetadataOf(refused)["owner"];
    auto it = std::find(stack.ids.begin(), stack.ids.end(), owner);
    shard = it != stack.ids.end() ? static_cast<int>(it - stack.ids.begin())
                                  : stack.OwnerOf(command);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return -1;
}

}  // namespace

bool BenchShards(const MeasureOptions& measure, int ledger_port, const std::string& base,
                 int accounts, ShardFigures* figures) {
  for (int shards : {1, 2, 4}) {
    ShardedStack stack;
    if (!stack.Start(shards, ledger_port, absl::StrCat(base, "/shards", shards))) return false;
    Figures f = Measure(measure, figures->in_flight,
                        [&, shards](int64_t i, std::function<void(bool)> done) {
                          v1::Command c =
                              TransferCommand(absl::StrCat("sh", shards, "-", i), accounts, i);
                          SubmitAsync(*stack.stubs[stack.OwnerOf(c)], c, v1::APPLIED,
                                      std::move(done));
                        });
    figures->first_seen.emplace_back(shards, f);
  }

  // The pause: every one of the 1,024 slots moves from s0 to s1, a run of
  // kRunSlots at a time, through a local etcd member, while 8 callers keep commands going
  // on the accounts of the run that is moving. What each such command waited is its time
  // from first attempt to answer.
  std::unique_ptr<demo::LocalEtcd> etcd;
  {
    std::error_code error;
    std::filesystem::create_directories(base + "/etcd", error);
    absl::StatusOr<std::unique_ptr<demo::LocalEtcd>> started = demo::LocalEtcd::Start(base + "/etcd");
    if (!started.ok()) {
      std::fprintf(stderr, "bench: %s\n", started.status().ToString().c_str());
      return false;
    }
    etcd = std::move(*started);
  }
  ShardedStack stack;
  stack.etcd_endpoint = etcd->endpoint();
  stack.store = &etcd->store();
  if (!stack.Start(2, ledger_port, base + "/move", /*all_on_first=*/true)) return false;
  constexpr uint32_t kRunSlots = 64;
  constexpr uint32_t kRuns = kSlotCount / kRunSlots;
  figures->moved_slots = kSlotCount;
  figures->runs = kRuns;
  std::vector<std::vector<int64_t>> on_run(kRuns);  // accounts by the run of their slot
  for (int64_t a = 0; a < accounts; ++a) {
    on_run[SlotOf(kTenant, "account", absl::StrCat("a", a)) / kRunSlots].push_back(a);
  }
  std::atomic<int> moving{-1};  // the run moving now, -1 between moves
  std::atomic<bool> stop{false};
  std::atomic<int64_t> next{0};
  std::vector<std::vector<double>> waits(8);
  std::atomic<int64_t> lost{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 8; ++t) {
    callers.emplace_back([&, t] {
      while (!stop.load()) {
        const int run = moving.load();
        if (run < 0 || on_run[run].empty()) {
          std::this_thread::sleep_for(std::chrono::microseconds(200));
          continue;
        }
        const int64_t k = next.fetch_add(1);
        const std::vector<int64_t>& mine = on_run[run];
        v1::Command c = TransferCommand(absl::StrCat("mv-", k), accounts,
                                        mine[static_cast<size_t>(k) % mine.size()]);
        const double ms = SubmitThroughAMove(stack, c);
        if (ms < 0) {
          lost++;
        } else {
          waits[t].push_back(ms);
        }
      }
    });
  }
  OperatorIdentity identity;
  identity.tenant = kTenant;
  identity.operator_name = "bench";  // no policy file: development, every operator
  ShardAdminFactory admins = GrpcShardAdmins(identity);
  absl::Status failed;
  for (uint32_t run = 0; run < kRuns && failed.ok(); ++run) {
    MoveOptions move;
    move.first = run * kRunSlots;
    move.last = move.first + kRunSlots - 1;
    move.to = "s1";
    moving = static_cast<int>(run);
    // Commands on the run start before its freeze, as a user's would.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    absl::StatusOr<MoveReport> report = MoveSlots(move, *stack.store, admins, RealClock::Get());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    moving = -1;
    if (!report.ok()) {
      failed = report.status();
      break;
    }
    figures->frozen_ms = std::max(figures->frozen_ms, report->frozen_ms);
    figures->copied += report->copied;
  }
  stop = true;
  for (auto& caller : callers) caller.join();
  if (!failed.ok()) {
    std::fprintf(stderr, "bench: a move failed: %s\n", failed.ToString().c_str());
    return false;
  }
  std::vector<double> all;
  for (const auto& w : waits) all.insert(all.end(), w.begin(), w.end());
  std::sort(all.begin(), all.end());
  figures->moving_commands = static_cast<int64_t>(all.size());
  figures->lost = lost.load();
  if (!all.empty()) {
    figures->pause_p50_ms = all[all.size() / 2];
    figures->pause_p99_ms = all[std::min(all.size() - 1, all.size() * 99 / 100)];
    figures->pause_max_ms = all.back();
  }
  return true;
}

}  // namespace eonce::bench
