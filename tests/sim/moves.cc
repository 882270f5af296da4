// Slot moves in a sharded world, by the protocol on the map store (each step one
// compare-and-swap on the epoch the mover last saw; a mover that loses one re-reads and
// goes on from what the store says):
//   freeze   CAS(R0 -> the run in migration) => R1; pushed to T and F, F answering once
//            drained (or the store shows F drained at R1, or F holds no lease)
//   clear    CAS(R1 -> the same map) => Rc, the copy's own epoch; T drops whatever it
//            holds of the run, its business's fence raised to Rc first
//   copy     F's business raises its fence for the run to Rc, then exports (rows, inbox
//            entries) with F's records; T's business refuses an import below its fence,
//            else raises it to Rc and imports
//   seal     T's business raises its fence to the epoch the flip compares against, if the
//            last copy it took is this run's (else the run copies again)
//   flip     CAS(-> flipped) => R3; adopted at T, then F
//   drop     F's business raises its fence to R3, then drops the run; F drops its records
//   release  CAS(R3 -> released) => R4
//   abort    (before the flip only) CAS(Rn -> aborted) => Ra; adopted at F and T; T drops
//            its copy where it can (its leftovers are fenced until a later clear)
// The copy's own epoch and the seal are what the simulation found missing from the first
// design, whose clear carried the freeze's epoch: a mover that froze, was overtaken, and
// cleared late erased the new owner's only copy after the flip (F had dropped its own).
// With them, T refuses the clear or import of any mover but the last to copy, and after
// the seal, any at all.
// The mover here is that protocol, step by step, one event per step, so that two movers
// interleave: tools/reshard's mover moves onto the map store in its own change. Its calls
// to a shard go straight to that shard's slot gate, record store and business, as the
// admin services would; a step may find its shard down, or crash it before or after its
// work, and a run may stop before any step, as if killed. A move is run again until it
// ends; some get a rival run on the same slots, some a rival move on overlapping slots,
// some an aborting run.
#include <algorithm>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/coord/slots.h"
#include "common/base/status.h"
#include "dedupe_sidecar/sharding/slot_transfer.h"
#include "tests/sim/world.h"

namespace eonce::sim::internal {

// The chance that a run of the mover stops before one of its steps, as if killed.
inline constexpr double kMoverStops = 0.08;
inline constexpr int kMaxMoveAttempts = 300;
inline constexpr int kMaxRunSteps = 400;

namespace {
const char* StepName(int step) {
  static const char* names[] = {"read", "freeze", "push", "clear", "copy",
                                "flip", "drop",   "release", "abort", "end"};
  return names[step];
}
int ShardIndex(const std::string& id) { return id == "s1" ? 1 : 0; }
}  // namespace

void World::ScheduleMoves() {
  absl::StatusOr<SlotMap> map = coord_->Read();
  if (!map.ok()) return;
  // Runs of a few slots around accounts' slots, each within one owner's range.
  auto around = [&](uint32_t slot, uint32_t below, uint32_t above) {
    Move move;
    move.first = slot >= below ? slot - below : 0;
    move.last = std::min(slot + above, kSlotCount - 1);
    while (map->OwnerOf(move.first) != map->OwnerOf(slot)) ++move.first;
    while (map->OwnerOf(move.last) != map->OwnerOf(slot)) --move.last;
    move.from = map->OwnerOf(slot);
    move.to = move.from == "s0" ? "s1" : "s0";
    return move;
  };
  const int wanted = 1 + static_cast<int>(move_random_.Uniform(3));
  for (int tries = 0; tries < 20 && static_cast<int>(moves_.size()) < wanted; ++tries) {
    const int account = static_cast<int>(move_random_.Uniform(config_.accounts));
    const uint32_t slot = SlotOf(kTenant, "account", absl::StrCat("a", account));
    Move move = around(slot, 2, 2);
    bool overlaps = false;
    for (const Move& other : moves_) {
      overlaps |= move.first <= other.last && other.first <= move.last;
    }
    if (overlaps) continue;
    moves_.push_back(move);
    const int64_t at =
        500 + static_cast<int64_t>(move_random_.Uniform(config_.fault_phase_ms - 1'500));
    const int index = static_cast<int>(moves_.size()) - 1;
    loop_.After(at, [this, index] { StartMoverRun(index, false); });
    // A second mover on the same run, started while the first is under way.
    if (move_random_.Chance(config_.rival_mover)) {
      loop_.After(at + static_cast<int64_t>(move_random_.Uniform(300)),
                  [this, index] { StartMoverRun(index, false); });
    }
    // An operator who aborts it, at some point of its course.
    if (move_random_.Chance(config_.abort_move)) {
      loop_.After(at + static_cast<int64_t>(move_random_.Uniform(1'500)),
                  [this, index] { StartMoverRun(index, true); });
    }
    // A rival move of slots that overlap these, to the same shard, at about the same time.
    if (move_random_.Chance(config_.rival_mover / 2)) {
      moves_.push_back(around(slot, move_random_.Uniform(4), move_random_.Uniform(4)));
      const int rival = static_cast<int>(moves_.size()) - 1;
      loop_.After(at + static_cast<int64_t>(move_random_.Uniform(400)),
                  [this, rival] { StartMoverRun(rival, false); });
    }
  }
}

void World::StartMoverRun(int index, bool abort) {
  Move& move = moves_[index];
  if (move.done) return;
  if (++move.attempts > kMaxMoveAttempts) {
    Violation(absl::StrCat("liveness: the move of slots ", move.first, "-", move.last,
                           " never ended"));
    move.done = true;
    return;
  }
  MoverRun run;
  run.move = index;
  run.abort = abort;
  runs_.push_back(run);
  move.live_runs++;
  const int id = static_cast<int>(runs_.size()) - 1;
  Trace(absl::StrCat("mover #", id, " ", abort ? "aborts" : "moves", " slots ", move.first,
                     "-", move.last, " to ", move.to));
  loop_.After(0, [this, id] { MoverStep(id); });
}

void World::MoverStep(int id) {
  MoverRun& run = runs_[id];
  Move& move = moves_[run.move];
  auto end = [&](const std::string& why) {
    Trace(absl::StrCat("mover #", id, " ends: ", why));
    run.over = true;
    move.live_runs--;
    // A move that has not ended is run again (the operator runs the tool again).
    if (!move.done && move.live_runs == 0) {
      const int index = run.move;
      loop_.After(100 + static_cast<int64_t>(move_random_.Uniform(400)),
                  [this, index] { StartMoverRun(index, false); });
    }
  };
  // A run goes on after its move ended (rolled back or moved by another run): what it
  // does then is a stale mover's, which the store must refuse.
  if (run.over) return;
  if (faults_active_ && move_random_.Chance(kMoverStops)) {
    return end(absl::StrCat("killed before ", StepName(run.step)));
  }
  if (++run.step_count > kMaxRunSteps) return end("too many steps");
  const int from = ShardIndex(move.from), to = ShardIndex(move.to);
  absl::Status status = MoverDo(run, move, from, to);
  Trace(absl::StrCat("mover #", id, " ", StepName(run.last_step), ": ",
                     status.ok() ? absl::StrCat("ok at epoch ", run.epoch)
                                 : std::string(status.message())));
  if (run.step == kStepEnd) return end(status.ok() ? "done" : std::string(status.message()));
  if (!status.ok()) run.step = kStepRead;  // re-read, and go on from what the store says
  const int64_t delay = status.ok() ? 1 + static_cast<int64_t>(move_random_.Uniform(60))
                                    : 50 + static_cast<int64_t>(move_random_.Uniform(300));
  loop_.After(delay, [this, id] { MoverStep(id); });
}

}  // namespace eonce::sim::internal
