// The sharded world's coordination and books: each sidecar's lease and map watch on the
// simulated store, the lease check at the door, the relay that takes the businesses'
// follow-ups (credits) into the agent's outbox, and the check of every tenant's books over
// all shards at the end.
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/status.h"
#include "dedupe_sidecar/sharding/slot_transfer.h"
#include "tests/sim/world.h"

namespace eonce::sim::internal {

namespace {

// A business's outbox of follow-ups, read in place; records which command ids the relay
// acknowledged (it acknowledges only what its outbox took durably).
class SimFollowUpSource : public FollowUpSource {
 public:
  SimFollowUpSource(Inbox& inbox, std::set<std::string>& relayed)
      : inbox_(inbox), relayed_(relayed) {}
  absl::StatusOr<v1::PullFollowUpsResponse> Pull(int limit) override {
    EONCE_ASSIGN_OR_RETURN(v1::PullFollowUpsResponse page, inbox_.PullFollowUps(kTenant, limit));
    for (const auto& f : page.follow_ups()) command_of_[f.id()] = f.command().command_id();
    return page;
  }
  absl::Status Ack(const std::vector<std::string>& ids) override {
    v1::AckFollowUpsRequest request;
    for (const std::string& id : ids) {
      request.add_ids(id);
      relayed_.insert(command_of_[id]);
    }
    return inbox_.AckFollowUps(kTenant, request).status();
  }

 private:
  Inbox& inbox_;
  std::set<std::string>& relayed_;
  std::map<std::string, std::string> command_of_;
};

}  // namespace

absl::Status World::SeedSlotMap() {
  std::vector<v1::ShardInfo> shards(2);
  for (int i = 0; i < 2; ++i) {
    shards[i].set_id(absl::StrCat("s", i));
    shards[i].set_address(absl::StrCat("sim:s", i));
  }
  EONCE_ASSIGN_OR_RETURN(SlotMap even, SlotMap::Even(shards));
  return coord_->CompareAndSwap(0, even).status();
}

int World::OwnerShard(const v1::Command& command) {
  absl::StatusOr<SlotMap> map = coord_->Read();
  if (!map.ok()) return 0;
  return map->OwnerOf(SlotOfCommand(command)) == "s1" ? 1 : 0;
}

bool World::StorePartitioned(int shard) {
  if (!faults_active_) return false;
  const int64_t t = clock_.NowMs() - start_ms_;
  for (auto [from, to] : config_.store_partitions[shard]) {
    if (t >= from && t < to) return true;
  }
  return false;
}

void World::CoordTick(int shard) {
  const int node = SidecarNode(shard);
  Sidecar& sc = sidecars_[shard];
  if (!nodes_[node].up || sc.lease == nullptr) return;  // a restart starts its own ticks
  const std::string id = absl::StrCat("s", shard);
  if (!sc.lease->held()) {
    sc.synced = false;
    absl::Status acquired = sc.lease->Acquire(id, absl::StrCat("sim:", id));
    Trace(absl::StrCat(id, " acquire: ", acquired.ok() ? "ok" : acquired.message()));
  } else if (sidecar_clocks_[shard]->NowMs() - sc.lease->last_renewal_ms() >= kLeaseRenewMs) {
    absl::Status renewed = sc.lease->Renew();
    if (!renewed.ok()) {
      Trace(absl::StrCat(id, " renew: ", renewed.message()));
      if (!sc.lease->held()) sc.synced = false;
    }
  }
  if (sc.lease->held()) {
    // The watch: a newer map is adopted (its drain awaited on later ticks) and then
    // acknowledged under the lease.
    SimMapStore store(*coord_, [this, shard] { return !StorePartitioned(shard); });
    absl::StatusOr<SlotMap> newest = store.Read();
    if (newest.ok()) {
      absl::StatusOr<uint64_t> held = newest->epoch() >= sc.gate->epoch()
                                          ? sc.gate->Adopt(*newest, /*drain_timeout_ms=*/1)
                                          : sc.gate->epoch();
      if (held.ok() && sc.lease->Acknowledge(*held).ok()) {
        if (!sc.synced) Trace(absl::StrCat(id, " serves at epoch ", *held));
        sc.synced = true;
        DeclareHeldSlots(shard);
      }
    }
  }
  // The gate serves until the lease's time, once the store's map is adopted.
  sc.gate->SetServeUntilMs(sc.synced && sc.lease->held() ? sc.lease->ServeUntilMs() : 0);
  loop_.After(kLeaseRenewMs / 4, [this, shard, incarnation = nodes_[node].incarnation] {
    if (Alive(SidecarNode(shard), incarnation)) CoordTick(shard);
  });
}

// As the sidecar's coordinator does after each map it acknowledges: the business is told
// which runs of slots this shard holds at the map's epoch (SlotData.HoldSlotData), so that
// a run an abort gave back, or a run imported here, is counted and relayed again. Tried
// again on later ticks while the business is down.
void World::DeclareHeldSlots(int shard) {
  Sidecar& sc = sidecars_[shard];
  std::shared_ptr<const SlotMap> map = sc.gate->map();
  if (map == nullptr || map->epoch() <= sc.held_declared) return;
  const std::string id = absl::StrCat("s", shard);
  // The sidecar's own code (dedupe_sidecar/sharding/slot_transfer.h), through the simulated
  // network: a business that is down fails the first run.
  BusinessSlots business{*sc.upstream, *sidecar_clocks_[shard]};
  if (!HoldBusinessSlots(*map, id, business, sidecar_clocks_[shard]->NowMs() + business.timeout_ms)
           .ok()) {
    return;  // the next tick tries again
  }
  sc.held_declared = map->epoch();
  Trace(absl::StrCat(id, " business holds its slots at epoch ", map->epoch()));
}

bool World::Leased(int shard) {
  Sidecar& sc = sidecars_[shard];
  if (sc.lease == nullptr || !sc.synced || !sc.lease->held()) return false;
  if (sidecar_clocks_[shard]->NowMs() >= sc.lease->ServeUntilMs()) return false;
  // It believes it holds the shard: the store must agree, or another process could take it.
  if (coord_->ExpiresAtMs(sc.lease->lease_id()) <= clock_.NowMs()) {
    Violation(absl::StrCat("s", shard, " serves on a lease the store let go"));
    return false;
  }
  return true;
}

void World::SubmitTo(int shard, const Caller& caller, const v1::Command& command,
                     std::function<void(absl::StatusOr<v1::SubmitResponse>)> done) {
  Sidecar& sc = sidecars_[shard];
  if (options_.shards) {
    if (!Leased(shard)) {
      result_->not_leased++;
      done(Error(absl::StatusCode::kUnavailable, "NOT_LEASED",
                 "this sidecar does not hold its shard's lease now"));
      return;
    }
  }
  sc.deduper->Submit(caller, command, std::move(done));
}

void World::RelayTick() {
  if (nodes_[kAgent].up && outbox_ != nullptr) {
    for (int shard = 0; shard < 2; ++shard) {
      if (!nodes_[BusinessNode(shard)].up) continue;
      SimFollowUpSource source(inbox(shard), relayed_);
      FollowUpRelay relay(source, *outbox_);
      absl::StatusOr<int> taken = relay.RelayOnce();
      if (taken.ok() && *taken > 0) Trace(absl::StrCat("relayed ", *taken, " from s", shard));
    }
  }
  loop_.After(100, [this] { RelayTick(); });
}

void World::CheckBooks() {
  absl::StatusOr<SlotMap> map = coord_->Read();
  if (!map.ok()) return;
  // What was minted, per tenant: the accounts opened, by the effects on every shard.
  std::map<std::string, std::set<std::string>> opened;
  std::map<std::string, int64_t> minted;
  int64_t unclaimed = 0;
  for (int shard = 0; shard < 2; ++shard) {
    auto page = inbox(shard).ListEffects(0, 10'000);
    if (!page.ok()) continue;
    for (const v1::Effect& e : page->effects()) {
      if (e.method() != kOpen || e.entity().rfind("account/", 0) != 0) continue;
      if (opened[e.tenant()].insert(e.entity().substr(8)).second) minted[e.tenant()] += 100;
    }
    auto total = ledger(shard).GetTotal();
    if (total.ok()) unclaimed += total->unclaimed();
    if (inbox(shard).follow_ups_pending() > 0) {
      Violation(absl::StrCat("credits never relayed: s", shard, " holds ",
                             inbox(shard).follow_ups_pending(), " follow-ups"));
    }
  }
  // What is held, per tenant: each account as its slot's owner has it (a copy a move left
  // on another shard is not money).
  for (const auto& [tenant, accounts] : opened) {
    int64_t held = 0;
    for (const std::string& id : accounts) {
      const int owner = map->OwnerOf(SlotOf(tenant, "account", id)) == "s1" ? 1 : 0;
      auto account = ledger(owner).GetAccount(tenant, id);
      if (!account.ok()) {
        Violation(absl::StrCat("books: ", tenant, "'s account ", id, " is not at s", owner,
                               ", the owner of its slot"));
        continue;
      }
      held += account->balance();
    }
    // One tenant in this world: the businesses' unclaimed counters are all its own.
    if (held + unclaimed != minted[tenant]) {
      Violation(absl::StrCat("books: tenant ", tenant, " holds ", held, " (and ", unclaimed,
                             " unclaimed) of ", minted[tenant], " minted"));
    }
  }
}

}  // namespace eonce::sim::internal
