// The steps of a slot move (the protocol in moves.cc), and what each asks of a shard: its
// sidecar's slot gate and record store, and its business's slot data and fence.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/coord/slots.h"
#include "common/base/status.h"
#include "dedupe_sidecar/sharding/slot_transfer.h"
#include "tests/sim/world.h"

namespace eonce::sim::internal {

// The chance that a step of a move crashes a node of its shard, before or after its work.
inline constexpr double kMoveStepCrash = 0.04;

class SimMover {
 public:
  SimMover(World& w, World::MoverRun& run, World::Move& move, int from, int to)
      : w_(w), run_(run), move_(move), from_(from), to_(to) {}

  absl::Status Do() {
    run_.last_step = run_.step;
    switch (run_.step) {
      case kStepRead: return Read();
      case kStepFreeze: return Freeze();
      case kStepPush: return Push();
      case kStepClear: return Clear();
      case kStepCopy: return Copy();
      case kStepFlip: return Flip();
      case kStepDrop: return DropAtOldOwner();
      case kStepRelease: return Release();
      case kStepAbort: return Abort();
      default: return absl::InternalError("no such step");
    }
  }

 private:
  std::string Id(int shard) const { return absl::StrCat("s", shard); }
  uint32_t first() const { return move_.first; }
  uint32_t last() const { return move_.last; }

  absl::Status Read() {
    EONCE_ASSIGN_OR_RETURN(SlotMap map, w_.mover_store_->Read());
    run_.epoch = map.epoch();
    run_.seen = std::make_shared<const SlotMap>(map);
    absl::StatusOr<v1::SlotMigration> migration = MigrationOf(map, first(), last());
    if (migration.ok()) {
      if (!migration->flipped()) {
        // A run that lost a compare-and-swap after its copy flips from the new epoch, if
        // no later copy began (T's seal says); otherwise it copies again.
        run_.step = run_.abort ? kStepAbort : run_.copied ? kStepFlip : kStepPush;
        return absl::OkStatus();
      }
      if (run_.abort) {
        // ALREADY_FLIPPED: the move is finished instead.
        w_.Trace("abort refused (ALREADY_FLIPPED): the move is finished instead");
        run_.abort = false;
      }
      run_.step = kStepDrop;
      return absl::OkStatus();
    }
    bool at_to = true, at_from = true, moving = false;
    for (uint32_t slot = first(); slot <= last(); ++slot) {
      at_to &= map.OwnerOf(slot) == move_.to;
      at_from &= map.OwnerOf(slot) == move_.from;
      moving |= map.Migrating(slot);
    }
    run_.step = kStepEnd;
    if (at_to) {
      if (!move_.aborted) move_.moved = true;
      move_.done = true;
      return absl::OkStatus();
    }
    if (move_.aborted || run_.abort) {
      // Rolled back, or nothing to roll back yet (another run may still start it).
      move_.done |= move_.aborted;
      return absl::OkStatus();
    }
    if (moving || !at_from) {
      move_.done = true;
      return Error(absl::StatusCode::kFailedPrecondition, "SLOTS_BUSY",
                   "another move holds some of these slots: this one is refused");
    }
    run_.step = kStepFreeze;
    return absl::OkStatus();
  }

  // One compare-and-swap on the epoch this run last saw.
  absl::Status Write(const absl::StatusOr<SlotMap>& next) {
    if (!next.ok()) return next.status();
    EONCE_ASSIGN_OR_RETURN(SlotMap stored, w_.mover_store_->CompareAndSwap(run_.epoch, *next));
    run_.epoch = stored.epoch();
    run_.seen = std::make_shared<const SlotMap>(std::move(stored));
    return absl::OkStatus();
  }

  absl::Status Freeze() {
    absl::StatusOr<SlotMap> next = BeginMove(*run_.seen, first(), last(), move_.to);
    if (!next.ok()) {
      run_.step = kStepEnd;
      move_.done = true;
      return next.status();
    }
    EONCE_RETURN_IF_ERROR(Write(next));
    run_.step = kStepPush;
    return absl::OkStatus();
  }

  absl::Status Push() {
    Adopt(to_).IgnoreError();
    absl::StatusOr<uint64_t> drained = Adopt(from_);
    if (!drained.ok()) {
      // F's own acknowledgement under its lease says the same; and a shard with no lease
      // serves nothing (a new process adopts the store's map before it serves).
      EONCE_ASSIGN_OR_RETURN(ShardPresence presence, w_.mover_store_->Presence(Id(from_)));
      if (presence.live && presence.held_epoch < run_.epoch) {
        return absl::UnavailableError(absl::StrCat("s", from_, " has not drained epoch ",
                                                   run_.epoch, ": ", drained.status().message()));
      }
    }
    run_.step = kStepClear;
    return absl::OkStatus();
  }

  // Each copy takes an epoch of its own (a compare-and-swap that changes nothing else), and
  // clears and imports under it: T's fence then refuses the clear or import of a mover
  // that copied before, which, run late, would erase what a later copy brought (and what
  // T served after the flip). The flip is a CAS on the copy's epoch, so it follows the
  // last copy made.
  absl::Status Clear() {
    run_.copied = false;
    EONCE_RETURN_IF_ERROR(Write(*run_.seen));
    run_.copy_epoch = run_.epoch;
    EONCE_RETURN_IF_ERROR(Drop(to_, /*clear=*/true, run_.copy_epoch));
    run_.step = kStepCopy;
    return absl::OkStatus();
  }

  absl::Status Copy() {
    EONCE_RETURN_IF_ERROR(Up(from_));
    EONCE_RETURN_IF_ERROR(Up(to_));
    EONCE_RETURN_IF_ERROR(MaybeCrash(from_, "before", "export"));
    // F's business raises its fence for the run to the copy's epoch first, then exports.
    std::vector<std::string> rows;
    v1::ExportSlotDataRequest data;
    data.set_first_slot(first());
    data.set_last_slot(last());
    data.set_epoch(run_.copy_epoch);
    for (int page = 0; page < 1000; ++page) {
      EONCE_ASSIGN_OR_RETURN(v1::ExportSlotDataResponse got,
                             Fenced(w_.inbox(from_).ExportSlotData(data)));
      for (const std::string& row : got.rows()) rows.push_back(row);
      if (got.next_after().empty()) break;
      data.set_after(got.next_after());
    }
    std::vector<std::string> records;
    v1::ExportSlotsRequest request;
    request.set_first_slot(first());
    request.set_last_slot(last());
    request.set_limit(1 + static_cast<int>(w_.move_random_.Uniform(3)));
    World::Sidecar& f = w_.sidecars_[from_];
    for (int page = 0; page < 10'000; ++page) {
      EONCE_ASSIGN_OR_RETURN(v1::ExportSlotsResponse got, ExportSlots(*f.gate, *f.records, request));
      for (const std::string& record : got.records()) records.push_back(record);
      if (got.next_after().empty()) break;
      request.set_after(got.next_after());
    }
    EONCE_RETURN_IF_ERROR(MaybeCrash(from_, "after", "export"));
    EONCE_RETURN_IF_ERROR(Up(to_));
    EONCE_RETURN_IF_ERROR(MaybeCrash(to_, "before", "import"));
    World::Sidecar& t = w_.sidecars_[to_];
    {
      // Held while T's business writes: no map is adopted meanwhile, so the check holds.
      EONCE_ASSIGN_OR_RETURN(ShardGate::TransferHold hold, t.gate->HoldImport(first(), last(), 0));
      // T's business refuses an import older than what it already took for the run.
      for (size_t at = 0; at < std::max<size_t>(rows.size(), 1); at += Inbox::kMaxSlotRows) {
        v1::ImportSlotDataRequest put;
        put.set_first_slot(first());
        put.set_last_slot(last());
        put.set_epoch(run_.copy_epoch);
        for (size_t i = at; i < std::min(rows.size(), at + Inbox::kMaxSlotRows); ++i) {
          put.add_rows(rows[i]);
        }
        EONCE_RETURN_IF_ERROR(Fenced(w_.inbox(to_).ImportSlotData(put)).status());
      }
    }
    for (size_t at = 0; at < records.size(); at += kMaxExportRecords) {
      v1::ImportSlotsRequest put;
      put.set_first_slot(first());
      put.set_last_slot(last());
      for (size_t i = at; i < std::min(records.size(), at + kMaxExportRecords); ++i) {
        put.add_records(records[i]);
      }
      EONCE_RETURN_IF_ERROR(ImportSlots(*t.gate, *t.records, put).status());
    }
    EONCE_RETURN_IF_ERROR(MaybeCrash(to_, "after", "import"));
    w_.Trace(absl::StrCat("copied ", rows.size(), " rows and ", records.size(), " records"));
    run_.copied = true;
    run_.step = kStepFlip;
    return absl::OkStatus();
  }

  absl::Status Flip() {
    if (w_.faults_active_ && w_.move_random_.Chance(w_.config_.down_at_flip)) {
      const int shard = w_.move_random_.Chance(0.5) ? to_ : from_;
      const int node = w_.move_random_.Chance(0.5) ? SidecarNode(shard) : BusinessNode(shard);
      w_.Trace(absl::StrCat("crash ", w_.node(node).name, ": down at the flip"));
      w_.Crash(node);
    }
    EONCE_RETURN_IF_ERROR(Seal());
    EONCE_RETURN_IF_ERROR(Write(FinishMove(*run_.seen, first(), last())));
    Adopt(to_).IgnoreError();
    Adopt(from_).IgnoreError();
    run_.step = kStepDrop;
    return absl::OkStatus();
  }

  // Before the flip, T's business raises its fence for the run to the epoch the flip will
  // compare against, if the last copy it took is this run's: a mover that copied earlier
  // and clears or imports late is refused from now on, and a later copy than this run's
  // makes this run copy again.
  absl::Status Seal() {
    EONCE_RETURN_IF_ERROR(Up(to_));
    EONCE_ASSIGN_OR_RETURN(ShardGate::TransferHold hold,
                           w_.sidecars_[to_].gate->HoldImport(first(), last(), 0));
    for (uint32_t slot = first(); slot <= last(); ++slot) {
      const uint64_t fence = w_.inbox(to_).fences().fence(slot);
      if (fence != run_.copy_epoch) {
        run_.copied = false;
        return Error(absl::StatusCode::kAborted, "COPY_SUPERSEDED",
                     absl::StrCat("s", to_, " holds slot ", slot, " at epoch ", fence,
                                  ", not this run's copy (epoch ", run_.copy_epoch, ")"));
      }
    }
    // An import of no rows: the fence rises to the epoch, and nothing else changes.
    v1::ImportSlotDataRequest seal;
    seal.set_first_slot(first());
    seal.set_last_slot(last());
    seal.set_epoch(run_.epoch);
    return Fenced(w_.inbox(to_).ImportSlotData(seal)).status();
  }

  absl::Status DropAtOldOwner() {
    Adopt(to_).IgnoreError();
    Adopt(from_).IgnoreError();
    EONCE_RETURN_IF_ERROR(Drop(from_, /*clear=*/false, run_.epoch));
    run_.step = kStepRelease;
    return absl::OkStatus();
  }

  absl::Status Release() {
    EONCE_RETURN_IF_ERROR(Write(ReleaseMove(*run_.seen, first(), last())));
    Adopt(to_).IgnoreError();
    Adopt(from_).IgnoreError();
    move_.moved = true;
    move_.done = true;
    run_.step = kStepEnd;
    return absl::OkStatus();
  }

  absl::Status Abort() {
    EONCE_RETURN_IF_ERROR(Write(AbortMove(*run_.seen, first(), last())));
    move_.aborted = true;
    move_.done = true;
    w_.result_->aborted_moves++;
    run_.step = kStepEnd;
    Adopt(from_).IgnoreError();
    // T's partial copy goes where T can be reached; otherwise its fence keeps it inert
    // until a later move's clear step drops it.
    if (Adopt(to_).ok()) Drop(to_, /*clear=*/false, run_.epoch).IgnoreError();
    return absl::OkStatus();
  }

  // Counts a refusal by a business's fence.
  template <typename T>
  T Fenced(T result) {
    if (IsSlotFenced(result.status())) w_.result_->fenced++;
    return result;
  }

  absl::Status Up(int shard) {
    if (!w_.node(SidecarNode(shard)).up || !w_.node(BusinessNode(shard)).up) {
      return absl::UnavailableError(absl::StrCat("s", shard, " is down"));
    }
    return absl::OkStatus();
  }

  absl::Status MaybeCrash(int shard, const char* when, const char* step) {
    if (!w_.faults_active_ || !w_.move_random_.Chance(kMoveStepCrash)) return absl::OkStatus();
    const int node = w_.move_random_.Chance(0.5) ? SidecarNode(shard) : BusinessNode(shard);
    w_.Trace(absl::StrCat("crash ", w_.node(node).name, " ", when, " the move's ", step));
    w_.Crash(node);
    return absl::UnavailableError(absl::StrCat(w_.node(node).name, " crashed ", when, " ", step));
  }

  // The admin's AdoptSlotMap: the epoch held once drained.
  absl::StatusOr<uint64_t> Adopt(int shard) {
    if (!w_.node(SidecarNode(shard)).up) return absl::UnavailableError("sidecar down");
    EONCE_RETURN_IF_ERROR(MaybeCrash(shard, "before", "adopt"));
    // The drain is not waited for here: the world runs on this thread, so running work can
    // only finish between steps of the mover, which asks again.
    absl::StatusOr<uint64_t> held =
        w_.sidecars_[shard].gate->Adopt(*run_.seen, /*drain_timeout_ms=*/1);
    EONCE_RETURN_IF_ERROR(MaybeCrash(shard, "after", "adopt"));
    return held;
  }

  // The run's rows and records go from `shard`, its business's fence raised first. A
  // clear (at the new owner, before a copy) passes the gate's check: the run is moving
  // there, and what it holds of it is an aborted copy's leftovers.
  absl::Status Drop(int shard, bool clear, uint64_t epoch) {
    EONCE_RETURN_IF_ERROR(Up(shard));
    EONCE_RETURN_IF_ERROR(MaybeCrash(shard, "before", clear ? "clear" : "drop"));
    World::Sidecar& sc = w_.sidecars_[shard];
    // A clear at T passes as a drop does: the run is not T's, or moving to T unflipped.
    EONCE_ASSIGN_OR_RETURN(ShardGate::TransferHold hold, sc.gate->HoldDrop(first(), last(), 0));
    // The business raises its fence to the epoch first: refused (SLOT_FENCED) when it is
    // already above, a clear by a mover that copied before another.
    v1::DropSlotDataRequest data;
    data.set_first_slot(first());
    data.set_last_slot(last());
    data.set_epoch(epoch);
    EONCE_RETURN_IF_ERROR(Fenced(w_.inbox(shard).DropSlotData(data)).status());
    EONCE_RETURN_IF_ERROR(sc.records->DropSlots(first(), last()).status());
    return MaybeCrash(shard, "after", clear ? "clear" : "drop");
  }

  World& w_;
  World::MoverRun& run_;
  World::Move& move_;
  const int from_;
  const int to_;
};

absl::Status World::MoverDo(MoverRun& run, Move& move, int from, int to) {
  return SimMover(*this, run, move, from, to).Do();
}

}  // namespace eonce::sim::internal
