// The simulated world: the three components (agent, sidecar, business) with their own
// crash-able disks, the event loop, the trace, and the forward log the checker reads. The
// world's parts live in their own files: the network (network.cc), the components as
// processes, started, stopped and crashed on their disks (processes.cc), the run
// (world.cc), the workload (workload.cc) and the checks with the forward log
// (checker.cc).
#ifndef EONCE_TESTS_SIM_WORLD_H_
#define EONCE_TESTS_SIM_WORLD_H_

#include <array>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/clock.h"
#include "common/store/crash_fs.h"
#include "common/base/random.h"
#include "common/store/rocks.h"
#include "dedupe_sidecar/authz/audit_log.h"
#include "dedupe_sidecar/core/deduper.h"
#include "dedupe_sidecar/authz/policy.h"
#include "dedupe_sidecar/store/record_store.h"
#include "dedupe_sidecar/sharding/shard_gate.h"
#include "dedupe_sidecar/upstream/upstream.h"
#include "outbox_agent/core/credential.h"
#include "outbox_agent/example/projection.h"
#include "outbox_agent/core/outbox.h"
#include "outbox_agent/store/outbox_store.h"
#include "outbox_agent/core/replayer.h"
#include "outbox_agent/core/sidecar_client.h"
#include "outbox_agent/core/state_feed.h"
#include "services/inbox/inbox.h"
#include "services/ledger/ledger.h"
#include "outbox_agent/doors/relay.h"
#include "tests/sim/config.h"
#include "tests/sim/coord.h"
#include "tests/sim/event_loop.h"
#include "tests/sim/sim.h"

namespace eonce::sim::internal {

namespace fs = std::filesystem;

inline constexpr int64_t kSettleBoundMs = 90'000;
inline constexpr int64_t kTickMs = 20;
inline constexpr int64_t kMaxEvents = 2'000'000;
inline constexpr char kTenant[] = "acme";
inline constexpr char kOpen[] = "/eonce.ledger.v1.Ledger/OpenAccount";
inline constexpr char kTransfer[] = "/eonce.ledger.v1.Ledger/Transfer";
inline constexpr char kCredit[] = "/eonce.ledger.v1.Ledger/Credit";

class World;

// A mover run's steps (moves.cc).
enum MoverStepId {
  kStepRead, kStepFreeze, kStepPush, kStepClear, kStepCopy,
  kStepFlip, kStepDrop, kStepRelease, kStepAbort, kStepEnd
};

// A component's fault points: when one fires, the component crashes right there.
class NodeFaults : public FaultInjector {
 public:
  NodeFaults(World& world, int node) : world_(world), node_(node) {}
  absl::Status Hit(FaultPoint point) override;

 private:
  World& world_;
  const int node_;
};

struct Node {
  std::string name;
  std::string dir;
  std::shared_ptr<CrashFileSystem> fs = NewCrashFileSystem();
  int incarnation = 0;
  bool up = false;
  std::unique_ptr<NodeFaults> faults;
};

// kSidecar2 and kBusiness2 run only in sharded worlds: shard s1, whose sidecar forwards to
// its own business, as kSidecar does to kBusiness for s0.
enum NodeId { kAgent = 0, kSidecar = 1, kBusiness = 2, kSidecar2 = 3, kBusiness2 = 4 };
inline constexpr int kNodes = 5;

// The nodes of shard `shard`, and the shard of a sidecar or business node.
inline int SidecarNode(int shard) { return shard == 0 ? kSidecar : kSidecar2; }
inline int BusinessNode(int shard) { return shard == 0 ? kBusiness : kBusiness2; }
inline int ShardOfNode(int node) { return node == kSidecar2 || node == kBusiness2 ? 1 : 0; }
inline bool IsBusiness(int node) { return node == kBusiness || node == kBusiness2; }

class World {
 public:
  World(const SimOptions& options, SimResult* result)
      : options_(options),
        result_(result),
        master_(options.seed),
        net_random_(master_.Next()),
        fault_random_(master_.Next()),
        agent_random_(master_.Next()),
        workload_random_(master_.Next()),
        // Its own stream, apart from the master's, so that unsharded seeds stay as they were.
        move_random_(options.seed * 0x9E3779B97F4A7C15ULL + 7),
        loop_(clock_) {
    config_ = DrawConfig(master_, options);
    result_->legacy = config_.legacy;
    std::string base = absl::StrCat(options.work_dir, "/sim-", options.seed, "-",
                                    options.disable_sidecar_dedupe, options.unsynced_enqueue,
                                    options.no_business_fence, options.cas_ignores_epoch);
    fs::remove_all(base);
    base_ = base;
    const char* names[] = {"agent", "sidecar", "business", "sidecar2", "business2"};
    for (int i = 0; i < kNodes; ++i) {
      nodes_[i].name = names[i];
      nodes_[i].dir = absl::StrCat(base, "/", names[i]);
      fs::create_directories(nodes_[i].dir);
      nodes_[i].faults = std::make_unique<NodeFaults>(*this, i);
    }
  }

  ~World() {
    StopAgent();
    StopSidecar(0);
    StopSidecar(1);
    StopBusiness(0);
    StopBusiness(1);
    std::error_code ignored;
    fs::remove_all(base_, ignored);
  }

  void Run();

  // Called by NodeFaults: the component dies now.
  absl::Status Fire(int node, FaultPoint point);

 private:
  friend class SimSidecarClient;
  friend class SimUpstream;
  friend class SimMover;

  // --- the trace -----------------------------------------------------------------------
  void Trace(const std::string& line) {
    std::string stamped = absl::StrCat(clock_.NowMs() - start_ms_, " ", line);
    for (unsigned char c : stamped) {
      trace_hash_ ^= c;
      trace_hash_ *= 1099511628211ULL;
    }
    trace_hash_ ^= '\n';
    trace_hash_ *= 1099511628211ULL;
    if (options_.print_trace) std::fprintf(stderr, "%s\n", stamped.c_str());
  }

  void Violation(const std::string& what) {
    result_->violations.push_back(what);
    Trace("VIOLATION " + what);
  }

  // --- what the business is sent, not only what it applies -----------------------------
  // A sidecar may forward a command again only once the business proved that the last
  // forward was not applied (an outcome query said so, or the call provably never ran).
  // Checked where the sidecar issues each forward, so a double forward is seen even
  // behind an inbox that would have absorbed it, and whatever the network does later.
  // One exception: a business that keeps an inbox is the commit point, so a sidecar that
  // restarted may have lost an unsynced record and forward again (the inbox answers it);
  // within one sidecar incarnation, and always for a legacy business, it is a violation.
  // Sharded, a forward by the other shard counts like one by another incarnation.
  void ForwardIssued(const std::string& tenant, const std::string& command_id, int node);
  void ProvenNotApplied(const std::string& tenant, const std::string& command_id);

  // --- the network ---------------------------------------------------------------------
  bool Partitioned();
  int64_t Delay(const LinkFaults& link);
  bool Chance(double p) { return faults_active_ && net_random_.Chance(p); }

  // --- components ----------------------------------------------------------------------
  Node& node(int i) { return nodes_[i]; }
  bool Alive(int i, int incarnation) const {
    return nodes_[i].up && nodes_[i].incarnation == incarnation;
  }

  // Kills component `i` where it stands (its disk loses what was not synced), then stops
  // and restarts it later, as a supervisor would (processes.cc).
  void Crash(int i);
  void Start(int i);
  // The store options of node `i`: on its crash-able disk, small, one thread.
  StoreOptions Store(int i);

  // Opens node `node`'s store of `kind` ("agent", "sidecar", "business").
  absl::Status OpenStore(int node, const char* kind, const std::vector<ColumnFamilySpec>& families,
                         const StoreOptions& options, std::unique_ptr<RocksStore>* store);
  absl::Status StartAgent();
  void StopAgent();
  absl::Status StartSidecar(int shard);
  void StopSidecar(int shard);
  absl::Status StartBusiness(int shard);
  void StopBusiness(int shard);

  // --- the workload --------------------------------------------------------------------
  v1::Command MakeCommand(int index);
  void Enqueue(int index, int tries_left);
  void AgentTick();
  void DrainFeed();
  void RefreshProjection();
  bool Settled();
  void Check();
  // Every finished command sent again to the shard that owns its slot at the end: its
  // stored answer must come back, from a record when the business keeps no inbox.
  void CheckAnswersAfterMoves();

  // --- coordination and slot moves (sharded worlds; moves.cc, shards.cc) ---------------
  struct Move;
  struct MoverRun;
  // Seeds the store with the first map (what `eonce reshard seed` does).
  absl::Status SeedSlotMap();
  // Hands `command` to the sidecar of `shard`, which refuses it while it holds no lease.
  void SubmitTo(int shard, const Caller& caller, const v1::Command& command,
                std::function<void(absl::StatusOr<v1::SubmitResponse>)> done);
  // The sidecar of `shard` talks to the store: takes its lease, renews it, adopts newer
  // maps and acknowledges them; rescheduled every renewal period.
  void CoordTick(int shard);
  // Whether the sidecar of `shard` may serve now, on its own clock; and the check that it
  // never does past the store's expiry of its lease.
  bool Leased(int shard);
  void DeclareHeldSlots(int shard);
  bool StorePartitioned(int shard);
  // Draws the moves of the run (some with a rival mover, some to abort) and schedules them.
  void ScheduleMoves();
  // One step of mover run `run` (moves.cc); each step is its own event, so that two
  // movers interleave.
  void MoverStep(int run);
  void StartMoverRun(int move, bool abort);
  // Does the run's next step (move_steps.cc) and sets the one after.
  absl::Status MoverDo(MoverRun& run, Move& move, int from, int to);
  // The shard that owns a command's slot in the store's map now.
  int OwnerShard(const v1::Command& command);
  // Relays the follow-ups of every business into the agent's outbox.
  void RelayTick();
  // The per-tenant books over every shard, read from each slot's owner.
  void CheckBooks();

  const SimOptions options_;
  SimResult* result_;
  SeededRandom master_;
  SeededRandom net_random_;
  SeededRandom fault_random_;
  SeededRandom agent_random_;
  SeededRandom workload_random_;
  SeededRandom move_random_;
  ManualClock clock_;
  // Gates of sidecars that died (StopSidecar): declared before the event loop, so that the
  // calls still in it, which hold passes of these gates, are destroyed first.
  std::vector<std::unique_ptr<ShardGate>> retired_gates_;
  EventLoop loop_;
  Config config_;
  std::string base_;
  std::array<Node, kNodes> nodes_;
  bool faults_active_ = true;
  int64_t start_ms_ = 0;
  uint64_t trace_hash_ = 1469598103934665603ULL;

  // The agent.
  std::unique_ptr<OutboxStore::Filters> agent_filters_;
  std::unique_ptr<RocksStore> agent_rocks_;
  std::unique_ptr<OutboxStore> outbox_store_;
  std::unique_ptr<CredentialState> credential_;
  std::unique_ptr<StateFeed> feed_;
  std::shared_ptr<StateFeed::Subscription> subscription_;
  std::shared_ptr<StateFeed::Subscription> watchdog_;
  std::unique_ptr<Outbox> outbox_;
  std::unique_ptr<Replayer> replayer_;
  std::unique_ptr<SidecarClient> sidecar_client_;
  int64_t epoch_ = 1;
  bool want_revoked_ = false;

  // The sidecars: shard s0 (the only one unsharded) and s1.
  struct Sidecar {
    std::unique_ptr<RecordStoreFilters> filters;
    std::unique_ptr<RocksStore> rocks;
    std::unique_ptr<RecordStore> records;
    std::unique_ptr<AuditLog> audit;
    std::unique_ptr<PolicyStore> policy;
    std::unique_ptr<ShardGate> gate;  // sharded worlds only
    std::unique_ptr<SimShardLease> lease;  // sharded worlds only
    // Since it last took its lease, it read the store's map and adopted it: it may serve.
    bool synced = false;
    // The newest epoch at which its business was told the slots this shard holds (the
    // sidecar's HoldBusinessSlots after each acknowledged map); 0 since it last started.
    uint64_t held_declared = 0;
    std::unique_ptr<InFlightClaims> claims;
    std::unique_ptr<Deduper> deduper;
    std::unique_ptr<Upstream> upstream;
  };
  std::array<Sidecar, 2> sidecars_;
  int shards() const { return options_.shards ? 2 : 1; }

  // Coordination (sharded worlds): the store, each sidecar's clock, and the mover's view.
  std::unique_ptr<SimCoord> coord_;
  std::array<std::unique_ptr<NodeClock>, 2> sidecar_clocks_;
  std::unique_ptr<SimMapStore> mover_store_;
  int lease_incarnation_[2] = {-1, -1};  // the sidecar incarnation that holds `lease`

  // The moves: the run of slots each takes to the other shard, and whether it ended
  // (moved, rolled back, or refused because another move holds its slots).
  struct Move {
    uint32_t first = 0;
    uint32_t last = 0;
    std::string to;
    std::string from;
    int attempts = 0;  // runs of the mover started
    int live_runs = 0;  // of those, still going
    bool done = false;
    bool moved = false;    // it ended with the run at `to`
    bool aborted = false;  // it ended rolled back
  };
  std::vector<Move> moves_;
  // One run of the mover over a move: a step machine, one step per event.
  struct MoverRun {
    int move = 0;
    bool abort = false;   // this run rolls the move back (if it has not flipped)
    int step = 0;         // what it does next (moves.cc)
    int last_step = 0;
    int step_count = 0;
    uint64_t epoch = 0;   // of the map it last read or wrote
    uint64_t copy_epoch = 0;  // of this run's copy (its clear's compare-and-swap)
    bool copied = false;      // that copy is complete at T
    std::shared_ptr<const SlotMap> seen;  // that map: its next step is computed from it
    bool over = false;
  };
  std::vector<MoverRun> runs_;

  // The businesses: s0's (the only one unsharded) and s1's.
  struct Business {
    std::unique_ptr<RocksStore> rocks;
    std::unique_ptr<Inbox> inbox;
    std::unique_ptr<LedgerCore> ledger;
  };
  std::array<Business, 2> businesses_;
  Inbox& inbox(int shard = 0) { return *businesses_[shard].inbox; }
  LedgerCore& ledger(int shard = 0) { return *businesses_[shard].ledger; }
  // Follow-ups the relay took into the outbox (their command ids).
  std::set<std::string> relayed_;

  // The producer.
  std::vector<v1::Command> commands_;
  std::set<std::string> accepted_;
  std::set<std::string> abandoned_;
  std::set<int> accepted_intents_;
  int64_t abandoned_intents_ = 0;
  Projection projection_;

  struct ForwardLog {
    int forwards = 0;
    bool proven_not_applied = false;
    int incarnation = 0;  // the sidecar's, at the last forward
    int node = kSidecar;  // the sidecar that made the last forward
  };
  std::map<std::pair<std::string, std::string>, ForwardLog> forward_log_;
};

// The simulated network between the agent and the sidecar, and between the sidecar and
// the business (network.cc).
std::unique_ptr<SidecarClient> NewSimSidecarClient(World& world);
// What sidecar `node` forwards through.
std::unique_ptr<Upstream> NewSimUpstream(World& world, int node);

}  // namespace eonce::sim::internal

#endif  // EONCE_TESTS_SIM_WORLD_H_
