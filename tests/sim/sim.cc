#include "tests/sim/sim.h"

#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <queue>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/crash_fs.h"
#include "dedupe_sidecar/negative_controls.h"
#include "outbox_agent/client.h"
#include "common/log.h"
#include "common/random.h"
#include "common/rocks.h"
#include "common/status.h"
#include "dedupe_sidecar/audit_log.h"
#include "dedupe_sidecar/deduper.h"
#include "dedupe_sidecar/policy.h"
#include "dedupe_sidecar/record_store.h"
#include "eonce/ledger/v1/ledger.pb.h"
#include "outbox_agent/credential.h"
#include "outbox_agent/example/projection.h"
#include "outbox_agent/outbox.h"
#include "outbox_agent/outbox_store.h"
#include "outbox_agent/replayer.h"
#include "services/inbox/inbox.h"
#include "services/ledger/ledger.h"

namespace eonce::sim {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kFaultPhaseMs = 15'000;
constexpr int64_t kSettleBoundMs = 90'000;
constexpr int64_t kTickMs = 20;
constexpr int64_t kMaxEvents = 2'000'000;
constexpr char kTenant[] = "acme";
constexpr char kOpen[] = "/eonce.ledger.v1.Ledger/OpenAccount";
constexpr char kTransfer[] = "/eonce.ledger.v1.Ledger/Transfer";

// ---------------------------------------------------------------------------------------
// Time and events.

class EventLoop {
 public:
  explicit EventLoop(ManualClock& clock) : clock_(clock) {}

  void At(int64_t at_ms, std::function<void()> fn) {
    queue_.push(Event{std::max(at_ms, clock_.NowMs()), next_seq_++, std::move(fn)});
  }
  void After(int64_t delay_ms, std::function<void()> fn) {
    At(clock_.NowMs() + delay_ms, std::move(fn));
  }
  bool Step() {
    if (queue_.empty()) return false;
    Event event = queue_.top();
    queue_.pop();
    clock_.SetMs(event.at_ms);
    ++steps_;
    event.fn();
    return true;
  }
  int64_t steps() const { return steps_; }

 private:
  struct Event {
    int64_t at_ms;
    uint64_t seq;
    std::function<void()> fn;
    bool operator>(const Event& other) const {
      return at_ms != other.at_ms ? at_ms > other.at_ms : seq > other.seq;
    }
  };
  ManualClock& clock_;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> queue_;
  uint64_t next_seq_ = 0;
  int64_t steps_ = 0;
};

// ---------------------------------------------------------------------------------------
// The world's configuration, all drawn from the seed.

struct LinkFaults {
  double drop = 0;
  double duplicate = 0;
  double lose_answer = 0;
  int64_t min_delay_ms = 1;
  int64_t max_delay_ms = 10;
};

struct Config {
  bool legacy = false;
  int accounts = 3;
  int transfers = 12;
  double duplicate_enqueue = 0.2;
  // The agent stored the command but its answer never reached the producer.
  double lose_enqueue_answer = 0;
  std::array<double, kFaultPoints> fault_probability{};
  LinkFaults agent_link, business_link;
  std::vector<std::pair<int64_t, int64_t>> partitions;  // [start, end) of agent<->sidecar
  bool revoke = false;
  int64_t revoke_at_ms = 0;
  int64_t revoke_for_ms = 0;
};

Config DrawConfig(Random& r, const SimOptions& options) {
  Config c;
  c.legacy = !options.inbox_business && (options.disable_sidecar_dedupe || r.Chance(0.1));
  c.accounts = 2 + static_cast<int>(r.Uniform(4));
  c.transfers = 6 + static_cast<int>(r.Uniform(20));
  for (int p = 0; p < kFaultPoints; ++p) {
    bool armed = options.harsh || r.Chance(0.35);
    c.fault_probability[p] = armed ? (options.harsh ? 0.08 : 0.02 + 0.1 * (r.Uniform(100) / 100.0)) : 0;
  }
  auto link = [&](LinkFaults* l) {
    l->drop = r.Uniform(100) / 100.0 * (options.harsh ? 0.1 : 0.08);
    l->duplicate = r.Uniform(100) / 100.0 * (options.harsh ? 0.3 : 0.1);
    l->lose_answer = r.Uniform(100) / 100.0 * (options.harsh ? 0.15 : 0.08);
    l->min_delay_ms = 1;
    l->max_delay_ms = 2 + static_cast<int64_t>(r.Uniform(40));
  };
  link(&c.agent_link);
  link(&c.business_link);
  // Nothing can dedupe a copy made after the sidecar in front of a legacy business: the
  // sidecar's channel has gRPC retries off, and the deploy guide forbids a retrying proxy
  // on that hop. An inbox-mode business dedupes copies itself, so they are simulated.
  if (c.legacy) c.business_link.duplicate = 0;
  c.lose_enqueue_answer = r.Uniform(100) / 100.0 * (options.harsh ? 0.3 : 0.15);
  int partitions = static_cast<int>(r.Uniform(3));
  for (int i = 0; i < partitions; ++i) {
    int64_t start = static_cast<int64_t>(r.Uniform(kFaultPhaseMs - 3000));
    c.partitions.emplace_back(start, start + 200 + static_cast<int64_t>(r.Uniform(2500)));
  }
  c.revoke = r.Chance(0.3);
  c.revoke_at_ms = 500 + static_cast<int64_t>(r.Uniform(8000));
  c.revoke_for_ms = 100 + static_cast<int64_t>(r.Uniform(3000));
  return c;
}

// ---------------------------------------------------------------------------------------
// The world.

class World;

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

enum NodeId { kAgent = 0, kSidecar = 1, kBusiness = 2 };

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
        loop_(clock_) {
    config_ = DrawConfig(master_, options);
    result_->legacy = config_.legacy;
    std::string base = absl::StrCat(options.work_dir, "/sim-", options.seed, "-",
                                    options.disable_sidecar_dedupe, options.unsynced_enqueue);
    fs::remove_all(base);
    base_ = base;
    const char* names[] = {"agent", "sidecar", "business"};
    for (int i = 0; i < 3; ++i) {
      nodes_[i].name = names[i];
      nodes_[i].dir = absl::StrCat(base, "/", names[i]);
      fs::create_directories(nodes_[i].dir);
      nodes_[i].faults = std::make_unique<NodeFaults>(*this, i);
    }
  }

  ~World() {
    StopAgent();
    StopSidecar();
    StopBusiness();
    std::error_code ignored;
    fs::remove_all(base_, ignored);
  }

  void Run();

  // Called by NodeFaults: the component dies now.
  absl::Status Fire(int node, FaultPoint point) {
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

 private:
  friend class SimSidecarClient;
  friend class SimUpstream;

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
  void ForwardIssued(const std::string& tenant, const std::string& command_id) {
    ForwardLog& log = forward_log_[{tenant, command_id}];
    if (log.forwards > 0 && !log.proven_not_applied) {
      Violation(absl::StrCat("forwarded again without proof that it was not applied: ",
                             command_id, " (forward ", log.forwards + 1, ")"));
    }
    log.forwards++;
    log.proven_not_applied = false;
  }
  void ProvenNotApplied(const std::string& tenant, const std::string& command_id) {
    forward_log_[{tenant, command_id}].proven_not_applied = true;
  }

  // --- the network ---------------------------------------------------------------------
  bool Partitioned() {
    if (!faults_active_) return false;
    int64_t t = clock_.NowMs() - start_ms_;
    for (auto [from, to] : config_.partitions) {
      if (t >= from && t < to) return true;
    }
    return false;
  }
  int64_t Delay(const LinkFaults& link) {
    int64_t spread = faults_active_ ? link.max_delay_ms - link.min_delay_ms : 2;
    return link.min_delay_ms + static_cast<int64_t>(net_random_.Uniform(spread + 1));
  }
  bool Chance(double p) { return faults_active_ && net_random_.Chance(p); }

  // --- components ----------------------------------------------------------------------
  Node& node(int i) { return nodes_[i]; }
  bool Alive(int i, int incarnation) const {
    return nodes_[i].up && nodes_[i].incarnation == incarnation;
  }

  void Crash(int i) {
    Node& n = nodes_[i];
    if (!n.up) return;
    n.up = false;
    n.incarnation++;
    n.fs->Crash();  // from here on, nothing the dying process does reaches the disk
    result_->crashes++;
    loop_.After(0, [this, i] {
      if (i == kAgent) StopAgent();
      if (i == kSidecar) StopSidecar();
      if (i == kBusiness) StopBusiness();
      nodes_[i].fs->Recover();
      loop_.After(50 + static_cast<int64_t>(fault_random_.Uniform(500)), [this, i] { Start(i); });
    });
  }

  void Start(int i) {
    Node& n = nodes_[i];
    if (n.up) return;
    absl::Status started = i == kAgent ? StartAgent() : i == kSidecar ? StartSidecar() : StartBusiness();
    if (!started.ok()) {
      Violation(absl::StrCat(n.name, " could not restart: ", started.message()));
      return;
    }
    n.up = true;
    Trace(absl::StrCat("start ", n.name, " #", n.incarnation));
  }

  StoreOptions Store(int i) {
    StoreOptions o;
    o.env = nodes_[i].fs->env();
    o.block_cache_bytes = 1 << 20;
    o.periodic_compaction_seconds = 0;
    o.discard_info_log = true;
    return o;
  }

  absl::Status StartAgent();
  void StopAgent();
  absl::Status StartSidecar();
  void StopSidecar();
  absl::Status StartBusiness();
  void StopBusiness();

  // --- the workload --------------------------------------------------------------------
  v1::Command MakeCommand(int index);
  void Enqueue(int index, int tries_left);
  void AgentTick();
  void DrainFeed();
  void RefreshProjection();
  bool Settled();
  void Check();

  const SimOptions options_;
  SimResult* result_;
  SeededRandom master_;
  SeededRandom net_random_;
  SeededRandom fault_random_;
  SeededRandom agent_random_;
  SeededRandom workload_random_;
  ManualClock clock_;
  EventLoop loop_;
  Config config_;
  std::string base_;
  std::array<Node, 3> nodes_;
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

  // The sidecar.
  std::unique_ptr<RecordStoreFilters> sidecar_filters_;
  std::unique_ptr<RocksStore> sidecar_rocks_;
  std::unique_ptr<RecordStore> records_;
  std::unique_ptr<AuditLog> audit_;
  std::unique_ptr<PolicyStore> policy_;
  std::unique_ptr<Deduper> deduper_;
  std::unique_ptr<Upstream> upstream_;

  // The business.
  std::unique_ptr<RocksStore> business_rocks_;
  std::unique_ptr<Inbox> inbox_;
  std::unique_ptr<LedgerCore> ledger_;

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
  };
  std::map<std::pair<std::string, std::string>, ForwardLog> forward_log_;
};

absl::Status NodeFaults::Hit(FaultPoint point) { return world_.Fire(node_, point); }

// ---------------------------------------------------------------------------------------
// agent -> sidecar

class SimSidecarClient : public SidecarClient {
 public:
  explicit SimSidecarClient(World& w) : w_(w) {}

  template <typename T>
  struct Call {
    std::function<void(absl::StatusOr<T>)> done;
    bool finished = false;
  };

  template <typename T>
  std::function<void(absl::StatusOr<T>)> Finisher(std::function<void(absl::StatusOr<T>)> done,
                                                  int64_t deadline_ms) {
    auto call = std::make_shared<Call<T>>();
    call->done = std::move(done);
    // A call made by a process that is already dying is never answered.
    int caller = w_.node(kAgent).up ? w_.node(kAgent).incarnation : -1;
    auto finish = [this, call, caller](absl::StatusOr<T> answer) {
      if (call->finished) return;
      call->finished = true;
      if (!w_.Alive(kAgent, caller)) return;  // the caller died: nobody hears the answer
      call->done(std::move(answer));
    };
    w_.loop_.At(deadline_ms, [finish] { finish(absl::DeadlineExceededError("deadline")); });
    return finish;
  }

  // Sends `deliver` to the sidecar, which answers through `answer`; applies the link's
  // faults both ways.
  template <typename T>
  void Send(const std::string& what, std::function<void(absl::StatusOr<T>)> finish,
            std::function<void(std::function<void(absl::StatusOr<T>)>)> deliver) {
    const LinkFaults& link = w_.config_.agent_link;
    if (!w_.node(kSidecar).up) {
      w_.loop_.After(1, [finish] { finish(absl::UnavailableError("connection refused")); });
      return;
    }
    int copies = w_.Chance(link.duplicate) ? 2 : 1;
    for (int copy = 0; copy < copies; ++copy) {
      if (w_.Partitioned() || w_.Chance(link.drop)) {
        w_.Trace("net drop " + what);
        continue;
      }
      int target = w_.node(kSidecar).incarnation;
      w_.loop_.After(w_.Delay(link), [this, what, finish, deliver, target] {
        if (!w_.Alive(kSidecar, target)) return;
        w_.Trace("deliver " + what);
        deliver([this, what, finish, target](absl::StatusOr<T> answer) {
          if (!w_.Alive(kSidecar, target)) return;  // died before answering
          const LinkFaults& link = w_.config_.agent_link;
          if (w_.Partitioned() || w_.Chance(link.lose_answer)) {
            w_.Trace("net lose answer " + what);
            return;
          }
          w_.loop_.After(w_.Delay(link), [finish, answer] { finish(answer); });
        });
      });
    }
  }

  void Submit(const v1::Command& command, const Session& session, int64_t deadline_ms,
              std::function<void(absl::StatusOr<v1::SubmitResponse>)> done) override {
    auto finish = Finisher<v1::SubmitResponse>(std::move(done), deadline_ms);
    Caller caller;
    caller.tenant = session.tenant;
    caller.actor = session.actor;
    caller.credential_epoch = session.epoch;
    caller.deadline_ms = deadline_ms;
    Send<v1::SubmitResponse>(
        "submit " + command.command_id(), finish,
        [this, caller, command](std::function<void(absl::StatusOr<v1::SubmitResponse>)> answer) {
          w_.deduper_->Submit(caller, command, answer);
        });
  }

  void Reconcile(const v1::Command& command, const Session& session, int64_t deadline_ms,
                 std::function<void(absl::StatusOr<v1::ReconcileResponse>)> done) override {
    auto finish = Finisher<v1::ReconcileResponse>(std::move(done), deadline_ms);
    Caller caller;
    caller.tenant = session.tenant;
    v1::ReconcileRequest request = ReconcileRequestFor(command);
    Send<v1::ReconcileResponse>(
        "reconcile " + command.command_id(), finish,
        [this, caller, request](std::function<void(absl::StatusOr<v1::ReconcileResponse>)> answer) {
          answer(w_.deduper_->Reconcile(caller, request));
        });
  }

  std::optional<int64_t> RetentionMs(const std::string&) override {
    return RetentionOptions().retention_ms;
  }

 private:
  World& w_;
};

// ---------------------------------------------------------------------------------------
// sidecar -> business

class SimUpstream : public Upstream {
 public:
  explicit SimUpstream(World& w) : w_(w) {}

  void Forward(ForwardCall call, std::function<void(ForwardReply)> done) override {
    w_.ForwardIssued(call.tenant, call.command_id);
    auto state = std::make_shared<bool>(false);
    int caller = w_.node(kSidecar).up ? w_.node(kSidecar).incarnation : -1;
    auto finish = [this, state, caller, done, tenant = call.tenant,
                   command_id = call.command_id](ForwardReply reply) {
      if (*state) return;
      *state = true;
      if (!w_.Alive(kSidecar, caller)) return;
      if (reply.kind == ForwardReply::Kind::kNotApplied ||
          reply.kind == ForwardReply::Kind::kRefused) {
        w_.ProvenNotApplied(tenant, command_id);
      }
      done(std::move(reply));
    };
    w_.loop_.At(call.deadline_ms, [finish] {
      ForwardReply reply;
      reply.kind = ForwardReply::Kind::kUnknown;
      reply.detail = "deadline";
      finish(reply);
    });
    const LinkFaults& link = w_.config_.business_link;
    if (!w_.node(kBusiness).up) {
      w_.loop_.After(1, [finish] {
        ForwardReply reply;
        reply.kind = ForwardReply::Kind::kNotApplied;
        reply.detail = "connection refused";
        finish(reply);
      });
      return;
    }
    int copies = w_.Chance(link.duplicate) ? 2 : 1;
    for (int copy = 0; copy < copies; ++copy) {
      if (w_.Chance(link.drop)) {
        w_.Trace("net drop forward " + call.command_id);
        continue;
      }
      int target = w_.node(kBusiness).incarnation;
      w_.loop_.After(w_.Delay(link), [this, call, finish, target] {
        if (!w_.Alive(kBusiness, target)) return;
        absl::StatusOr<v1::CallResult> result = Apply(call);
        if (!w_.Alive(kBusiness, target)) return;  // crashed after applying
        if (!result.ok() || w_.Chance(w_.config_.business_link.lose_answer)) {
          w_.Trace("no answer to forward " + call.command_id);
          return;
        }
        w_.Trace(absl::StrCat("applied ", call.command_id, " code ", result->code()));
        ForwardReply reply;
        reply.kind = ForwardReply::Kind::kAnswered;
        reply.result = *result;
        w_.loop_.After(w_.Delay(w_.config_.business_link), [finish, reply] { finish(reply); });
      });
    }
  }

  void QueryOutcome(const std::string& tenant, const std::string& command_id, int64_t deadline_ms,
                    std::function<void(absl::StatusOr<v1::QueryOutcomeResponse>)> done) override {
    auto state = std::make_shared<bool>(false);
    int caller = w_.node(kSidecar).up ? w_.node(kSidecar).incarnation : -1;
    auto finish = [this, state, caller, done, tenant,
                   command_id](absl::StatusOr<v1::QueryOutcomeResponse> r) {
      if (*state) return;
      *state = true;
      if (!w_.Alive(kSidecar, caller)) return;
      if (r.ok() && !r->applied()) w_.ProvenNotApplied(tenant, command_id);
      done(std::move(r));
    };
    w_.loop_.At(deadline_ms, [finish] { finish(absl::DeadlineExceededError("deadline")); });
    if (!w_.node(kBusiness).up) {
      w_.loop_.After(1, [finish] { finish(absl::UnavailableError("connection refused")); });
      return;
    }
    int target = w_.node(kBusiness).incarnation;
    w_.loop_.After(w_.Delay(w_.config_.business_link), [this, tenant, command_id, finish, target] {
      if (!w_.Alive(kBusiness, target)) return;
      auto outcome = w_.inbox_->QueryOutcome(tenant, command_id);
      w_.loop_.After(w_.Delay(w_.config_.business_link), [finish, outcome] { finish(outcome); });
    });
  }

  bool Reachable() override { return w_.node(kBusiness).up; }

 private:
  absl::StatusOr<v1::CallResult> Apply(const ForwardCall& call) {
    CallIdentity id;
    id.command_id = call.command_id;
    id.tenant = call.tenant;
    id.actor = call.actor;
    id.idempotency_key = call.idempotency_key;
    id.fencing_token = call.fencing_token;
    if (call.method == kOpen) {
      ledger::v1::OpenAccountRequest request;
      request.ParseFromString(call.request);
      return w_.ledger_->OpenAccount(id, request);
    }
    ledger::v1::TransferRequest request;
    request.ParseFromString(call.request);
    return w_.ledger_->Transfer(id, request);
  }

  World& w_;
};

// ---------------------------------------------------------------------------------------
// Starting and stopping the components.

absl::Status World::StartAgent() {
  agent_filters_ = std::make_unique<OutboxStore::Filters>(clock_);
  EONCE_ASSIGN_OR_RETURN(agent_rocks_, RocksStore::Open(nodes_[kAgent].dir,
                                                        OutboxStore::ColumnFamilies(*agent_filters_),
                                                        Store(kAgent)));
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
  outbox_ = std::make_unique<Outbox>(*outbox_store_, *credential_, clock_, agent_random_,
                                     CommandLimits(), feed_.get(), nodes_[kAgent].faults.get());
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
  // The credential the operator wants now (it may have changed while the agent was down).
  Session current = credential_->session();
  if (current.epoch != epoch_ || credential_->revoked() != want_revoked_) {
    EONCE_RETURN_IF_ERROR(credential_->Set(epoch_, want_revoked_));
  }
  RefreshProjection();
  return absl::OkStatus();
}

void World::StopAgent() {
  replayer_.reset();
  outbox_.reset();
  subscription_.reset();
  watchdog_.reset();
  feed_.reset();
  credential_.reset();
  outbox_store_.reset();
  if (agent_rocks_ != nullptr) agent_rocks_->CloseWithoutFlush();
  agent_rocks_.reset();
  agent_filters_.reset();
}

absl::Status World::StartSidecar() {
  sidecar_filters_ = std::make_unique<RecordStoreFilters>(clock_);
  auto families = RecordStore::ColumnFamilies(*sidecar_filters_);
  for (auto& f : AuditLog::ColumnFamilies(*sidecar_filters_)) families.push_back(f);
  EONCE_ASSIGN_OR_RETURN(sidecar_rocks_, RocksStore::Open(nodes_[kSidecar].dir, families, Store(kSidecar)));
  // The negative control: a sidecar that remembers nothing forwards every command.
  records_ = options_.disable_sidecar_dedupe
                 ? std::make_unique<ForgettingRecordStore>(*sidecar_rocks_, clock_,
                                                           RetentionOptions())
                 : std::make_unique<RecordStore>(*sidecar_rocks_, clock_, RetentionOptions());
  EONCE_RETURN_IF_ERROR(records_->SettleRetention());
  audit_ = std::make_unique<AuditLog>(*sidecar_rocks_, clock_, 90LL * 24 * 3600 * 1000);
  EONCE_ASSIGN_OR_RETURN(policy_, PolicyStore::Open(""));
  DeduperOptions options;
  options.lease_ms = 2'500;
  options.forward_timeout_ms = 1'000;
  options.outcome_query_timeout_ms = 1'000;
  deduper_ = std::make_unique<Deduper>(*records_, *audit_, *upstream_, *policy_, clock_, options,
                                       nodes_[kSidecar].faults.get());
  return absl::OkStatus();
}

void World::StopSidecar() {
  deduper_.reset();
  audit_.reset();
  policy_.reset();
  records_.reset();
  if (sidecar_rocks_ != nullptr) sidecar_rocks_->CloseWithoutFlush();
  sidecar_rocks_.reset();
  sidecar_filters_.reset();
}

absl::Status World::StartBusiness() {
  auto families = LedgerCore::ColumnFamilies();
  for (auto& f : Inbox::ColumnFamilies(clock_)) families.push_back(f);
  EONCE_ASSIGN_OR_RETURN(business_rocks_, RocksStore::Open(nodes_[kBusiness].dir, families, Store(kBusiness)));
  inbox_ = std::make_unique<Inbox>(*business_rocks_, clock_, config_.legacy,
                                   nodes_[kBusiness].faults.get());
  ledger_ = std::make_unique<LedgerCore>(*business_rocks_, *inbox_);
  return absl::OkStatus();
}

void World::StopBusiness() {
  ledger_.reset();
  inbox_.reset();
  if (business_rocks_ != nullptr) business_rocks_->CloseWithoutFlush();
  business_rocks_.reset();
}

// ---------------------------------------------------------------------------------------
// The workload and the checks.

v1::Command World::MakeCommand(int index) {
  v1::Command c;
  // Some producers give no command id: the client library creates one before the first
  // attempt (World::Enqueue).
  if (index % 3 != 2) c.set_command_id(absl::StrCat("c", index));
  if (index < config_.accounts) {
    ledger::v1::OpenAccountRequest open;
    open.set_id(absl::StrCat("a", index));
    open.set_initial_balance(100);
    c.set_target_method(kOpen);
    c.set_request(open.SerializeAsString());
    c.mutable_entity()->set_type("account");
    c.mutable_entity()->set_id(open.id());
    return c;
  }
  ledger::v1::TransferRequest t;
  int from = static_cast<int>(workload_random_.Uniform(config_.accounts));
  int to = (from + 1 + static_cast<int>(workload_random_.Uniform(config_.accounts - 1))) % config_.accounts;
  t.set_from(absl::StrCat("a", from));
  t.set_to(absl::StrCat("a", to));
  t.set_amount(1 + static_cast<int64_t>(workload_random_.Uniform(60)));
  c.set_target_method(kTransfer);
  c.set_request(t.SerializeAsString());
  c.mutable_entity()->set_type("account");
  c.mutable_entity()->set_id(t.from());
  return c;
}

void World::Enqueue(int index, int tries_left) {
  v1::Command& command = commands_[index];
  // What the client library does before its first attempt (outbox_agent/client.h); the
  // negative control leaves the id to the agent, which creates one per attempt.
  if (!options_.late_ids) AssignCommandId(&command, workload_random_);
  if (tries_left <= 0) {
    abandoned_.insert(command.command_id());
    ++abandoned_intents_;
    return;
  }
  if (!nodes_[kAgent].up) {
    loop_.After(100, [this, index, tries_left] { Enqueue(index, tries_left - 1); });
    return;
  }
  auto r = outbox_->Enqueue(command);
  bool answer_lost = r.ok() && workload_random_.Chance(config_.lose_enqueue_answer);
  Trace(absl::StrCat("enqueue ", index, " ",
                     r.ok() ? r->record().command().command_id() : "", " ",
                     r.ok() ? (r->created() ? "created" : "existing") : r.status().ToString(),
                     answer_lost ? " answer lost" : ""));
  if (r.ok() && !answer_lost) {
    accepted_.insert(r->record().command().command_id());
    accepted_intents_.insert(index);
    return;
  }
  // The producer did not get a yes: it tries again, with the same command id.
  loop_.After(100, [this, index, tries_left] { Enqueue(index, tries_left - 1); });
}

void World::RefreshProjection() {
  // After a restart the feed may have missed acks: read what is true from the store.
  if (outbox_store_ == nullptr) return;
  std::string after;
  for (int page = 0; page < 1000; ++page) {
    auto acked = outbox_store_->List(v1::ACKED, after, 1000);
    if (!acked.ok() || acked->empty()) break;
    for (const auto& record : *acked) projection_.Apply(record);
    after = acked->back().command().command_id();
    if (acked->size() < 1000) break;
  }
}

void World::DrainFeed() {
  if (subscription_ == nullptr) return;
  v1::WatchEvent event;
  while (subscription_->Next(&event, 0)) {
    Trace(absl::StrCat("state ", event.command_id(), " ", v1::OutboxState_Name(event.state())));
    if (event.state() != v1::ACKED) continue;
    auto record = outbox_store_->Get(event.command_id());
    if (record.ok() && record->has_value()) projection_.Apply(**record);
  }
  if (subscription_->cut_off()) RefreshProjection();
}

void World::AgentTick() {
  if (nodes_[kAgent].up) {
    replayer_->Pump();
    DrainFeed();
  }
  loop_.After(kTickMs, [this] { AgentTick(); });
}

bool World::Settled() {
  if (!nodes_[kAgent].up || !nodes_[kSidecar].up || !nodes_[kBusiness].up) return false;
  if (accepted_.size() + abandoned_.size() < commands_.size()) return false;
  // A parked command (unknown outcome, a legacy business) is a clear state that waits for
  // an operator, and so are the later commands of its entity, which wait behind it.
  std::set<std::string> blocked_entities;
  std::vector<OutboxRecord> waiting;
  for (const std::string& id : accepted_) {
    auto record = outbox_store_->Get(id);
    if (!record.ok() || !record->has_value()) return true;  // lost: Check reports it
    const OutboxRecord& r = **record;
    if (r.state() == v1::UNKNOWN && r.last_error().reason() == "OUTCOME_UNKNOWN") {
      blocked_entities.insert(r.command().entity().id());
    } else if (!IsFinal(r.state())) {
      waiting.push_back(r);
    }
  }
  for (const OutboxRecord& r : waiting) {
    if (blocked_entities.count(r.command().entity().id()) == 0) return false;
  }
  return true;
}

void World::Run() {
  start_ms_ = clock_.NowMs();
  sidecar_client_ = std::make_unique<SimSidecarClient>(*this);
  upstream_ = std::make_unique<SimUpstream>(*this);
  for (int i = 0; i < 3; ++i) Start(i);
  int total = config_.accounts + config_.transfers;
  for (int i = 0; i < total; ++i) commands_.push_back(MakeCommand(i));
  result_->commands = total;
  for (int i = 0; i < total; ++i) {
    // Accounts first, so that most transfers find them.
    int64_t at = i < config_.accounts ? static_cast<int64_t>(workload_random_.Uniform(200))
                                      : 300 + static_cast<int64_t>(workload_random_.Uniform(4000));
    loop_.After(at, [this, i] { Enqueue(i, 1000); });
    if (workload_random_.Chance(config_.duplicate_enqueue)) {
      loop_.After(at + static_cast<int64_t>(workload_random_.Uniform(6000)),
                  [this, i] { Enqueue(i, 1000); });
    }
  }
  if (config_.revoke) {
    loop_.After(config_.revoke_at_ms, [this] {
      want_revoked_ = true;
      Trace("revoke");
      if (credential_ != nullptr && nodes_[kAgent].up) credential_->Set(epoch_, true).IgnoreError();
    });
    loop_.After(config_.revoke_at_ms + config_.revoke_for_ms, [this] {
      want_revoked_ = false;
      ++epoch_;
      Trace("renew");
      if (credential_ != nullptr && nodes_[kAgent].up) credential_->Set(epoch_, false).IgnoreError();
    });
  }
  loop_.After(0, [this] { AgentTick(); });
  loop_.After(kFaultPhaseMs, [this] {
    faults_active_ = false;
    Trace("faults stop");
  });

  // Acks published while the session is revoked are stale answers applied.
  int64_t fault_end = start_ms_ + kFaultPhaseMs;
  int64_t bound = fault_end + kSettleBoundMs;
  bool settled = false;
  while (loop_.steps() < kMaxEvents && loop_.Step()) {
    if (clock_.NowMs() > bound) break;
    if (!faults_active_ && Settled()) {
      settled = true;
      break;
    }
  }
  result_->events = loop_.steps();
  result_->sim_ms = clock_.NowMs() - start_ms_;
  result_->settle_ms = std::max<int64_t>(0, clock_.NowMs() - fault_end);
  if (!settled) {
    Violation(absl::StrCat("liveness: not settled ", kSettleBoundMs, " ms after the faults stopped"));
  }
  if (nodes_[kAgent].up && nodes_[kBusiness].up) Check();
  result_->trace_hash = trace_hash_;
}

void World::Check() {
  // Ground truth: the business's effect ledger.
  std::map<std::string, std::vector<v1::Effect>> effects;
  auto page = inbox_->ListEffects(0, 10'000);
  if (!page.ok()) {
    Violation("cannot read the effect ledger");
    return;
  }
  for (const auto& e : page->effects()) effects[e.command_id()].push_back(e);
  for (const auto& [id, list] : effects) {
    if (list.size() > 1) Violation(absl::StrCat("duplicate effect: ", id, " applied ", list.size(), " times"));
  }

  int64_t acked_transfers = 0, acked_amount = 0;
  for (const std::string& id : accepted_) {
    auto found = outbox_store_->Get(id);
    if (!found.ok() || !found->has_value()) {
      Violation(absl::StrCat("loss: accepted command ", id, " is gone from the outbox"));
      continue;
    }
    const OutboxRecord& r = **found;
    if (!IsFinal(r.state()) && r.last_error().reason().empty() && r.state() != v1::QUEUED) {
      Violation(absl::StrCat("loss: ", id, " is ", v1::OutboxState_Name(r.state()), " with no reason"));
    }
    int applied = static_cast<int>(effects[id].size());
    if (r.state() == v1::ACKED) {
      if (r.result().code() != 0 || applied != 1) {
        Violation(absl::StrCat("acked ", id, " has ", applied, " effects"));
        continue;
      }
      if (r.command().target_method() == kTransfer) {
        ledger::v1::TransferResponse response;
        response.ParseFromString(r.result().response());
        if (response.effect_seq() != effects[id][0].seq()) {
          Violation(absl::StrCat("acked ", id, " answer names effect ", response.effect_seq(),
                                 " but the ledger holds ", effects[id][0].seq()));
        }
        ledger::v1::TransferRequest request;
        request.ParseFromString(r.command().request());
        ++acked_transfers;
        acked_amount += request.amount();
      }
    }
    if (r.state() == v1::REJECTED && applied != 0) {
      Violation(absl::StrCat("rejected ", id, " has ", applied, " effects"));
    }
  }
  for (const auto& [id, list] : effects) {
    if (!id.empty() && accepted_.count(id) == 0) {
      Violation(absl::StrCat("loss: ", id, " has an effect but the outbox never accepted it"));
    }
  }
  // One intent, one record: a lost Enqueue answer must not become a second command.
  int64_t records = 0;
  for (int64_t n : outbox_store_->CountsByState()) records += n;
  if (records > static_cast<int64_t>(accepted_intents_.size()) + abandoned_intents_) {
    Violation(absl::StrCat("the outbox holds ", records, " records for ",
                           accepted_intents_.size(),
                           " accepted intents: a retry was stored as a second command"));
  }
  auto total = ledger_->GetTotal();
  if (!total.ok() || total->total_balance() != total->total_minted()) {
    Violation("ledger total not conserved");
  }
  RefreshProjection();
  if (projection_.transfers() != acked_transfers || projection_.amount_moved() != acked_amount) {
    Violation(absl::StrCat("projection holds ", projection_.transfers(), " transfers and ",
                           projection_.amount_moved(), " moved; the acks say ", acked_transfers,
                           " and ", acked_amount));
  }
}

}  // namespace

SimResult RunSeed(const SimOptions& options) {
  SetLogsEnabled(false);
  SimResult result;
  result.seed = options.seed;
  World world(options, &result);
  world.Run();
  return result;
}

std::string ReplayCommand(uint64_t seed) { return absl::StrCat("./eonce sim --seed ", seed); }

}  // namespace eonce::sim
