// The components as processes: each started on its own simulated disk (a node's first
// store copied from an empty one of its kind), stopped, and crashed by its fault points
// (what it had not synced is lost), then restarted after a while.
#include <unistd.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/status.h"
#include "dedupe_sidecar/core/negative_controls.h"
#include "tests/sim/world.h"

namespace eonce::sim::internal {

absl::Status NodeFaults::Hit(FaultPoint point) { return world_.Fire(node_, point); }

absl::Status World::Fire(int node, FaultPoint point) {
  // A process that is dying does nothing more.
  if (!nodes_[node].up) return absl::AbortedError("the process is gone");
  if (!faults_active_) return absl::OkStatus();
  double p = config_.fault_probability[static_cast<int>(point)];
  if (p <= 0 || !fault_random_.Chance(p)) return absl::OkStatus();
  result_->fired[static_cast<int>(point)]++;
  Trace(absl::StrCat("crash ", nodes_[node].name, " at ", FaultPointName(point)));
  Crash(node);
  return absl::AbortedError(absl::StrCat("crashed at ", FaultPointName(point)));
}

void World::Crash(int i) {
  Node& n = nodes_[i];
  if (!n.up) return;
  n.up = false;
  n.incarnation++;
  n.fs->Crash();  // from here on, nothing the dying process does reaches the disk
  result_->crashes++;
  loop_.After(0, [this, i] {
    if (i == kAgent) StopAgent();
    if (i == kSidecar || i == kSidecar2) StopSidecar(ShardOfNode(i));
    if (IsBusiness(i)) StopBusiness(ShardOfNode(i));
    nodes_[i].fs->Recover();
    loop_.After(50 + static_cast<int64_t>(fault_random_.Uniform(500)), [this, i] { Start(i); });
  });
}

void World::Start(int i) {
  Node& n = nodes_[i];
  if (n.up) return;
  absl::Status started = i == kAgent       ? StartAgent()
                         : IsBusiness(i) ? StartBusiness(ShardOfNode(i))
                                         : StartSidecar(ShardOfNode(i));
  if (!started.ok()) {
    Violation(absl::StrCat(n.name, " could not restart: ", started.message()));
    return;
  }
  n.up = true;
  Trace(absl::StrCat("start ", n.name, " #", n.incarnation));
}

StoreOptions World::Store(int i) {
  StoreOptions o;
  o.inline_durability = true;  // one thread: a fsync and its callbacks run in place
  o.env = nodes_[i].fs->env();
  o.block_cache_bytes = 1 << 20;
  // Small memtables: a run writes little, and the log is preallocated by this size at
  // every open (most of a run's time, with 16 MiB).
  o.write_buffer_bytes = 256 << 10;
  o.periodic_compaction_seconds = 0;
  o.discard_info_log = true;
  return o;
}

namespace {

// Empty stores, one per kind of component and work folder, made once per process and
// removed at its exit.
struct Templates {
  std::map<std::string, std::string> dirs;  // kind and work folder -> the template
  ~Templates() {
    std::error_code ignored;
    for (const auto& [key, dir] : dirs) fs::remove_all(dir, ignored);
  }
};

}  // namespace

absl::Status World::OpenStore(int node, const char* kind,
                              const std::vector<ColumnFamilySpec>& families,
                              const StoreOptions& options, std::unique_ptr<RocksStore>* store) {
  // A store's first open creates its column families one by one, and RocksDB writes and
  // reads back its options file for each: most of a short run's time. A node's first
  // store is instead a copy of an empty one of its kind, made once per process.
  std::error_code error;
  if (fs::is_empty(nodes_[node].dir, error) && !error) {
    static Templates templates;  // destroyed at exit: the folders go
    const std::string key = absl::StrCat(kind, "|", options_.work_dir);
    auto it = templates.dirs.find(key);
    if (it == templates.dirs.end()) {
      const std::string dir =
          absl::StrCat(options_.work_dir, "/sim-template-", ::getpid(), "-", kind);
      fs::remove_all(dir, error);
      StoreOptions plain = options;
      plain.env = nullptr;
      {
        EONCE_ASSIGN_OR_RETURN(std::unique_ptr<RocksStore> made,
                               RocksStore::Open(dir, families, plain));
      }
      it = templates.dirs.emplace(key, dir).first;
    }
    for (const auto& entry : fs::directory_iterator(it->second)) {
      if (entry.path().filename() == "LOCK") continue;
      fs::copy(entry.path(), nodes_[node].dir / entry.path().filename(), error);
      if (error) return absl::InternalError(absl::StrCat("copy a template: ", error.message()));
    }
  }
  EONCE_ASSIGN_OR_RETURN(*store, RocksStore::Open(nodes_[node].dir, families, options));
  return absl::OkStatus();
}

absl::Status World::StartAgent() {
  agent_filters_ = std::make_unique<OutboxStore::Filters>(clock_);
  EONCE_RETURN_IF_ERROR(OpenStore(kAgent, "agent", OutboxStore::ColumnFamilies(*agent_filters_),
                                  Store(kAgent), &agent_rocks_));
  // The negative control: the agent's synced writes (Enqueue's among them) reach no disk.
  nodes_[kAgent].fs->set_drop_wal_syncs(options_.unsynced_enqueue);
  outbox_store_ = std::make_unique<OutboxStore>(*agent_rocks_, clock_, OutboxStoreOptions());
  EONCE_RETURN_IF_ERROR(outbox_store_->RecoverAfterRestart().status());
  EONCE_ASSIGN_OR_RETURN(credential_, CredentialState::Load(*outbox_store_, kTenant, "agent", 1));
  feed_ = std::make_unique<StateFeed>(1 << 16, 4);
  subscription_ = feed_->Subscribe();
  // Checked at the moment an ack is published: the fence must keep every answer out
  // while the credential is revoked.
  watchdog_ = feed_->Subscribe([this] {
    v1::WatchEvent event;
    while (watchdog_ != nullptr && watchdog_->Next(&event, 0)) {
      if (event.state() == v1::ACKED && credential_ != nullptr && credential_->revoked()) {
        Violation(absl::StrCat("stale answer applied: ", event.command_id(),
                               " acked while the credential is revoked"));
      }
    }
  });
  ReplayerOptions replay;
  replay.max_in_flight = 8;
  replay.submit_timeout_ms = 3'000;
  replay.claim_ttl_ms = 6'500;
  replay.retry.base_backoff_ms = 20;
  replay.retry.max_backoff_ms = 1'000;
  replay.retry.max_attempts = 10'000;
  replay.retry.max_age_ms = 24LL * 3600 * 1000;
  replay.retry.parked_recheck_ms = 5'000;
  replayer_ = std::make_unique<Replayer>(*outbox_store_, *sidecar_client_, *credential_, clock_,
                                         agent_random_, replay, feed_.get(),
                                         nodes_[kAgent].faults.get());
  // As the agent is assembled: a new lane head that would be sent at once is marked as
  // maybe sent with its Enqueue's sync, and its first claim is not synced.
  outbox_ = std::make_unique<Outbox>(*outbox_store_, *credential_, clock_, agent_random_,
                                     CommandLimits(), feed_.get(), nodes_[kAgent].faults.get(),
                                     replayer_.get());
  // The credential the operator wants now (it may have changed while the agent was down).
  Session current = credential_->session();
  if (current.epoch != epoch_ || credential_->revoked() != want_revoked_) {
    EONCE_RETURN_IF_ERROR(credential_->Set(epoch_, want_revoked_));
  }
  RefreshProjection();
  return absl::OkStatus();
}

void World::StopAgent() {
  outbox_.reset();
  replayer_.reset();
  subscription_.reset();
  watchdog_.reset();
  feed_.reset();
  credential_.reset();
  outbox_store_.reset();
  if (agent_rocks_ != nullptr) agent_rocks_->CloseWithoutFlush();
  agent_rocks_.reset();
  agent_filters_.reset();
}

absl::Status World::StartSidecar(int shard) {
  Sidecar& sc = sidecars_[shard];
  const int node = SidecarNode(shard);
  sc.filters = std::make_unique<RecordStoreFilters>(clock_);
  auto families = RecordStore::ColumnFamilies(*sc.filters);
  for (auto& f : AuditLog::ColumnFamilies(*sc.filters)) families.push_back(f);
  EONCE_RETURN_IF_ERROR(OpenStore(node, "sidecar", families, Store(node), &sc.rocks));
  // The negative control: a sidecar that remembers nothing forwards every command.
  sc.records = options_.disable_sidecar_dedupe
                   ? std::make_unique<ForgettingRecordStore>(*sc.rocks, clock_,
                                                             RetentionOptions())
                   : std::make_unique<RecordStore>(*sc.rocks, clock_, RetentionOptions());
  EONCE_RETURN_IF_ERROR(sc.records->SettleRetention());
  sc.audit = std::make_unique<AuditLog>(*sc.rocks, clock_, 90LL * 24 * 3600 * 1000);
  EONCE_ASSIGN_OR_RETURN(sc.policy, PolicyStore::Open(""));
  if (options_.shards) {
    // The map it adopted is kept beside its store (written and synced outside the
    // simulated disk, as the real sidecar's is, so a crash keeps it).
    // On the sidecar's own clock: the gate lets commands in until its lease's time.
    EONCE_ASSIGN_OR_RETURN(sc.gate, ShardGate::Open(absl::StrCat("s", shard),
                                                    nodes_[node].dir + "/kept_slot_map.json",
                                                    *sidecar_clocks_[shard]));
    // A new process has no lease: it takes one, and adopts the store's map, on its first
    // coordination tick, and serves nothing before.
    sc.lease = std::make_unique<SimShardLease>(*coord_, *sidecar_clocks_[shard],
                                               [this, shard] { return !StorePartitioned(shard); });
    lease_incarnation_[shard] = nodes_[node].incarnation;
    loop_.After(0, [this, shard, incarnation = nodes_[node].incarnation] {
      if (Alive(SidecarNode(shard), incarnation)) CoordTick(shard);
    });
  }
  DeduperOptions options;
  options.lease_ms = 2'500;
  options.forward_timeout_ms = 1'000;
  options.outcome_query_timeout_ms = 1'000;
  // The negative control: claims of commands in flight that hold nothing.
  sc.claims = options_.forgetful_claims ? std::make_unique<ForgetfulClaims>()
                                        : std::make_unique<InFlightClaims>();
  sc.deduper = std::make_unique<Deduper>(*sc.records, *sc.audit, *sc.upstream, *sc.policy, clock_,
                                         options, nodes_[node].faults.get(), sc.gate.get(),
                                         sc.claims.get());
  return absl::OkStatus();
}

void World::StopSidecar(int shard) {
  Sidecar& sc = sidecars_[shard];
  sc.deduper.reset();
  sc.claims.reset();  // a crash forgets every claim
  // A crash does not give the lease back: the store lets it go once its TTL ran out.
  sc.lease.reset();
  sc.held_declared = 0;  // a new process tells its business again
  // A dead process's calls still in the event loop hold passes of its gate: it is kept
  // until the world ends, so that they release into it and not into freed memory.
  if (sc.gate != nullptr) retired_gates_.push_back(std::move(sc.gate));
  sc.audit.reset();
  sc.policy.reset();
  sc.records.reset();
  if (sc.rocks != nullptr) sc.rocks->CloseWithoutFlush();
  sc.rocks.reset();
  sc.filters.reset();
}

absl::Status World::StartBusiness(int shard) {
  Business& b = businesses_[shard];
  const int node = BusinessNode(shard);
  auto families = LedgerCore::ColumnFamilies();
  for (auto& f : Inbox::ColumnFamilies(clock_)) families.push_back(f);
  EONCE_RETURN_IF_ERROR(
      OpenStore(node, "business", families, Inbox::StoreOptionsFor(Store(node)), &b.rocks));
  b.inbox = std::make_unique<Inbox>(*b.rocks, clock_, config_.legacy, nodes_[node].faults.get());
  LedgerOptions ledger_options;
  ledger_options.cross_slot_credits = options_.shards;
  b.ledger = std::make_unique<LedgerCore>(*b.rocks, *b.inbox, ledger_options);
  return absl::OkStatus();
}

void World::StopBusiness(int shard) {
  Business& b = businesses_[shard];
  b.ledger.reset();
  b.inbox.reset();
  if (b.rocks != nullptr) b.rocks->CloseWithoutFlush();
  b.rocks.reset();
}

}  // namespace eonce::sim::internal
