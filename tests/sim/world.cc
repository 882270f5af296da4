// The run itself: the components started, the workload and the faults scheduled, the
// fault phase, then settling, then the checks.
#include <algorithm>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/base/log.h"
#include "tests/sim/world.h"

namespace eonce::sim::internal {

void World::Run() {
  start_ms_ = clock_.NowMs();
  if (options_.shards) {
    coord_ = std::make_unique<SimCoord>(clock_, options_.cas_ignores_epoch);
    mover_store_ = std::make_unique<SimMapStore>(*coord_, [] { return true; });
    for (int shard = 0; shard < 2; ++shard) {
      sidecar_clocks_[shard] = std::make_unique<NodeClock>(clock_, config_.clock_offset_ms[shard],
                                                           config_.clock_drift[shard]);
    }
    if (absl::Status written = SeedSlotMap(); !written.ok()) {
      Violation(absl::StrCat("no slot map: ", written.message()));
      return;
    }
  }
  sidecar_client_ = NewSimSidecarClient(*this);
  for (int shard = 0; shard < shards(); ++shard) {
    sidecars_[shard].upstream = NewSimUpstream(*this, SidecarNode(shard));
  }
  for (int i = 0; i < 3; ++i) Start(i);
  if (options_.shards) {
    Start(kSidecar2);
    Start(kBusiness2);
    ScheduleMoves();
    loop_.After(0, [this] { RelayTick(); });
  }
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
  loop_.After(config_.fault_phase_ms, [this] {
    faults_active_ = false;
    Trace("faults stop");
  });

  // Acks published while the session is revoked are stale answers applied.
  int64_t fault_end = start_ms_ + config_.fault_phase_ms;
  int64_t bound = fault_end + kSettleBoundMs;
  bool settled = false;
  int64_t last_settle_check_ms = -1;
  while (loop_.steps() < kMaxEvents && loop_.Step()) {
    if (clock_.NowMs() > bound) break;
    // Once per simulated millisecond: the check reads every command's record.
    if (!faults_active_ && clock_.NowMs() != last_settle_check_ms) {
      last_settle_check_ms = clock_.NowMs();
      if (!Settled()) continue;
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
  if (nodes_[kAgent].up && nodes_[kBusiness].up && (!options_.shards || nodes_[kBusiness2].up)) {
    Check();
  }
  for (const Move& move : moves_) {
    result_->move_attempts += move.attempts;
    result_->moves += move.moved;
  }
  result_->credits = static_cast<int64_t>(relayed_.size());
  result_->trace_hash = trace_hash_;
}

}  // namespace eonce::sim::internal

namespace eonce::sim {

SimResult RunSeed(const SimOptions& options) {
  SetLogsEnabled(false);
  SimResult result;
  result.seed = options.seed;
  internal::World world(options, &result);
  world.Run();
  return result;
}

std::string ReplayCommand(uint64_t seed, bool shards) {
  return absl::StrCat("./eonce sim --seed ", seed, shards ? " --shards" : "");
}

}  // namespace eonce::sim
