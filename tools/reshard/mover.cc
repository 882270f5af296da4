#include "tools/reshard/mover.h"

#include <algorithm>
#include <map>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/base/status.h"

namespace eonce {
namespace {

class Move {
 public:
  Move(const MoveOptions& options, MapStore& store, const ShardAdminFactory& admins,
       Clock& clock)
      : o_(options), store_(store), admins_(admins), clock_(clock) {}

  // Each attempt reads the store and goes on from the step it finds; an attempt that lost
  // the map to another run (its compare-and-swap failed, or a shard holds a newer map than
  // the one it worked under) starts again from what the store says now.
  absl::StatusOr<MoveReport> Run() {
    for (;;) {
      absl::StatusOr<SlotMap> read = store_.Read();
      if (!read.ok()) {
        if (read.status().code() != absl::StatusCode::kNotFound) return read.status();
        return Error(absl::StatusCode::kFailedPrecondition, "NO_SLOT_MAP",
                     "the store holds no slot map yet: seed it first (eonce reshard seed)");
      }
      map_ = std::make_unique<SlotMap>(std::move(*read));
      if (report_.lost_races == 0) EONCE_RETURN_IF_ERROR(StoreNotBehindShards());
      absl::StatusOr<MoveReport> result = o_.abort ? RollBack() : Forward();
      if (result.ok() || !LostTheMap()) return result;
      if (++report_.lost_races > o_.max_lost_races) {
        return Error(absl::StatusCode::kAborted, "CONTENDED",
                     absl::StrCat("another run changed the slot map ", report_.lost_races,
                                  " times during this one; last: ", result.status().message()));
      }
      Step(absl::StrCat("another run changed the map first (", result.status().message(),
                        "); reading it again"));
    }
  }

 private:
  absl::StatusOr<MoveReport> Forward() {
    absl::StatusOr<v1::SlotMigration> move = MigrationOf(*map_, o_.first, o_.last);
    if (!move.ok()) {
      if (AllOwnedBy(o_.to)) return Done("already there");
      if (started_) {
        return Error(absl::StatusCode::kFailedPrecondition, "MOVE_ABORTED",
                     absl::StrCat("slots ", o_.first, "-", o_.last,
                                  " were rolled back by another run at epoch ", map_->epoch()));
      }
      EONCE_ASSIGN_OR_RETURN(SlotMap frozen, BeginMove(*map_, o_.first, o_.last, o_.to,
                                                       o_.to_address));
      EONCE_RETURN_IF_ERROR(Publish(std::move(frozen), "freeze"));
      move = MigrationOf(*map_, o_.first, o_.last);
      if (!move.ok()) return move.status();
    }
    if (move->to_shard() != o_.to) {
      return Error(absl::StatusCode::kFailedPrecondition, "OTHER_MOVE",
                   absl::StrCat("slots ", o_.first, "-", o_.last, " are moving to shard ",
                                move->to_shard(), ", not ", o_.to,
                                ": finish or abort that move first"));
    }
    from_ = move->from_shard();
    if (!move->flipped()) {
      // The copy belongs to the run that wrote the frozen epoch: take it over, so that a
      // flip by the run that froze it cannot follow this run's clear.
      if (owned_epoch_ != map_->epoch()) {
        SlotMap same = *map_;
        EONCE_RETURN_IF_ERROR(Publish(std::move(same), "take over the freeze"));
      }
      started_ = true;
      EONCE_RETURN_IF_ERROR(AdoptAt(o_.to));
      EONCE_RETURN_IF_ERROR(AwaitDrained(from_));
      const int64_t frozen_at = clock_.NowMs();
      if (o_.stop_after == "freeze") return Done("stopped after freeze");
      EONCE_ASSIGN_OR_RETURN(int64_t cleared, Drop(o_.to));
      Step(absl::StrCat("cleared ", cleared, " records left on ", o_.to));
      EONCE_RETURN_IF_ERROR(Copy());
      if (report_.unplaced > 0 && !o_.allow_unplaced) {
        absl::StatusOr<MoveReport> rolled = RollBack();
        if (!rolled.ok()) return rolled.status();
        return Error(absl::StatusCode::kFailedPrecondition, "UNPLACED_RECORDS",
                     absl::StrCat(report_.unplaced, " records on shard ", from_,
                                  " name no entity (written before the sidecar kept it), so "
                                  "their slot is unknown; the move was rolled back. Wait until "
                                  "they expire, or move with --allow_unplaced"));
      }
      if (o_.stop_after == "copy") return Done("stopped after copy");
      EONCE_ASSIGN_OR_RETURN(SlotMap flipped, FinishMove(*map_, o_.first, o_.last));
      EONCE_RETURN_IF_ERROR(Publish(std::move(flipped), "flip"));
      // The new owner first: once the old one refuses with the new epoch, callers find
      // the new owner already taking the run.
      EONCE_RETURN_IF_ERROR(AdoptAt(o_.to));
      report_.frozen_ms = clock_.NowMs() - frozen_at;
      EONCE_RETURN_IF_ERROR(AdoptAt(from_));
      if (o_.stop_after == "flip") return Done("stopped after flip");
    } else {
      // Resumed after the flip: both ends hold it before the old owner drops its copy.
      EONCE_RETURN_IF_ERROR(AdoptAt(o_.to));
      EONCE_RETURN_IF_ERROR(AdoptAt(from_));
    }
    EONCE_ASSIGN_OR_RETURN(int64_t dropped, Drop(from_));
    report_.dropped += dropped;
    Step(absl::StrCat("dropped ", dropped, " records on ", from_));
    if (o_.stop_after == "drop") return Done("stopped after drop");
    EONCE_ASSIGN_OR_RETURN(SlotMap released, ReleaseMove(*map_, o_.first, o_.last));
    EONCE_RETURN_IF_ERROR(Publish(std::move(released), "release"));
    TellElsewhere({});
    return Done("moved");
  }

  absl::StatusOr<MoveReport> RollBack() {
    absl::StatusOr<v1::SlotMigration> move = MigrationOf(*map_, o_.first, o_.last);
    if (!move.ok()) return Done("nothing to roll back");
    if (move->flipped()) {
      return Error(absl::StatusCode::kFailedPrecondition, "ALREADY_FLIPPED",
                   absl::StrCat("slots ", o_.first, "-", o_.last, " already belong to ",
                                move->to_shard(), " (epoch ", map_->epoch(),
                                "): run the move again to finish it"));
    }
    from_ = move->from_shard();
    const std::string to = move->to_shard();
    EONCE_ASSIGN_OR_RETURN(SlotMap back, AbortMove(*map_, o_.first, o_.last));
    EONCE_RETURN_IF_ERROR(Publish(std::move(back), "roll back"));
    // The store holds the roll-back now: the ends learn it from there if they cannot be
    // told. The new owner's partial copy is fenced meanwhile, and a later move clears it.
    TellElsewhere({});
    absl::StatusOr<int64_t> dropped =
        AdoptAt(to).ok() ? Drop(to) : absl::StatusOr<int64_t>(absl::UnavailableError(""));
    if (dropped.ok()) {
      report_.dropped += *dropped;
      Step(absl::StrCat("dropped ", *dropped, " copied records on ", to));
    } else {
      Step(absl::StrCat("shard ", to, " could not drop its partial copy now; the next move "
                        "of these slots to it clears it"));
    }
    return Done("rolled back");
  }

  absl::Status Copy() {
    std::string after;
    do {
      v1::ExportSlotsRequest page;
      page.set_first_slot(o_.first);
      page.set_last_slot(o_.last);
      page.set_after(after);
      page.set_limit(o_.page_records);
      EONCE_ASSIGN_OR_RETURN(v1::ExportSlotsResponse exported, Admin(from_).Export(page));
      report_.unplaced += exported.unplaced();
      if (exported.records_size() > 0 || exported.business_rows_size() > 0) {
        v1::ImportSlotsRequest import;
        import.set_first_slot(o_.first);
        import.set_last_slot(o_.last);
        import.set_epoch(map_->epoch());
        const int rows = exported.business_rows_size();
        *import.mutable_records() = std::move(*exported.mutable_records());
        *import.mutable_business_rows() = std::move(*exported.mutable_business_rows());
        EONCE_ASSIGN_OR_RETURN(int64_t imported, Admin(o_.to).Import(import));
        report_.copied += imported;
        report_.copied_rows += rows;
      }
      after = exported.next_after();
    } while (!after.empty());
    Step(absl::StrCat("copied ", report_.copied, " records and ", report_.copied_rows,
                      " business rows from ", from_, " to ", o_.to));
    return absl::OkStatus();
  }

  // Writes `next` if the store still holds the map this attempt read, and goes on from it.
  absl::Status Publish(SlotMap next, const char* step) {
    absl::StatusOr<SlotMap> stored = store_.CompareAndSwap(map_->epoch(), next);
    if (!stored.ok()) return stored.status();
    map_ = std::make_unique<SlotMap>(std::move(*stored));
    owned_epoch_ = map_->epoch();
    Step(absl::StrCat(step, ": epoch ", map_->epoch()));
    return absl::OkStatus();
  }

  // Whether the store's map moved on from the one this attempt worked under.
  // A store whose map is older than one a shard holds went back in time (restored from a
  // snapshot, or a survivor forced into a new cluster): a step written on it would carry
  // an epoch the shards have already passed, and could bring back contents they moved on
  // from. Every shard that answers is asked; one that does not cannot be checked.
  absl::Status StoreNotBehindShards() {
    for (const v1::ShardInfo& shard : map_->proto().shards()) {
      absl::StatusOr<v1::SlotMap> held = Admin(shard.id()).Held();
      if (held.ok() && held->epoch() > map_->epoch()) {
        return Error(absl::StatusCode::kFailedPrecondition, "STORE_BEHIND_SHARDS",
                     absl::StrCat("shard ", shard.id(), " holds epoch ", held->epoch(),
                                  " but the store's map is at ", map_->epoch(),
                                  ": the store went back (a restore?); raise its revision past ",
                                  held->epoch(), " and seed the newest map the shards hold "
                                  "(docs/operations.md, restoring etcd)"));
      }
    }
    return absl::OkStatus();
  }

  bool LostTheMap() {
    absl::StatusOr<SlotMap> now = store_.Read();
    return now.ok() && now->epoch() != map_->epoch();
  }

  absl::StatusOr<int64_t> Drop(const std::string& shard) {
    return Admin(shard).Drop(o_.first, o_.last, map_->epoch());
  }

  absl::Status AdoptAt(const std::string& shard) {
    absl::StatusOr<uint64_t> held = Admin(shard).Adopt(*map_, o_.drain_timeout_ms);
    if (!held.ok()) {
      return absl::Status(held.status().code(),
                          absl::StrCat("shard ", shard, " did not adopt epoch ", map_->epoch(),
                                       ": ", held.status().message()));
    }
    return absl::OkStatus();
  }

  // The old owner holds the freeze and nothing runs on the run any more: told at once
  // (its adoption answers once drained), or, where it cannot be told, once it published
  // that it holds and drained this epoch (its acknowledgement in the store).
  absl::Status AwaitDrained(const std::string& shard) {
    absl::Status told;
    for (int attempt = 0; attempt < std::max(1, o_.drain_attempts); ++attempt) {
      told = AdoptAt(shard);
      if (told.code() != absl::StatusCode::kDeadlineExceeded) break;
    }
    if (told.ok() || told.code() != absl::StatusCode::kUnavailable) return told;
    const int64_t give_up = clock_.NowMs() + o_.ack_timeout_ms;
    for (;;) {
      absl::StatusOr<ShardPresence> presence = store_.Presence(shard);
      if (presence.ok() && presence->live && presence->held_epoch >= map_->epoch()) {
        Step(absl::StrCat("shard ", shard, " acknowledged epoch ", presence->held_epoch,
                          " in the store"));
        return absl::OkStatus();
      }
      if (clock_.NowMs() >= give_up) {
        return Error(absl::StatusCode::kUnavailable, "NOT_ACKNOWLEDGED",
                     absl::StrCat("shard ", shard, " neither answered (", told.message(),
                                  ") nor acknowledged epoch ", map_->epoch(),
                                  " in the store; run the move again"));
      }
      clock_.SleepMs(o_.ack_poll_ms);
    }
  }

  // Every shard is told the map, best effort: the store has it, and each shard's sidecar
  // reads it from there; telling them spares their callers a redirect.
  void TellElsewhere(const std::string& except) {
    for (const v1::ShardInfo& shard : map_->proto().shards()) {
      if (shard.id() == except) continue;
      if (!Admin(shard.id()).Adopt(*map_, 1).ok()) {
        Step(absl::StrCat("shard ", shard.id(), " will read epoch ", map_->epoch(),
                          " from the store"));
      }
    }
  }

  bool AllOwnedBy(const std::string& shard) const {
    for (uint32_t slot = o_.first; slot <= o_.last && slot < kSlotCount; ++slot) {
      if (map_->OwnerOf(slot) != shard) return false;
    }
    return o_.first <= o_.last;
  }

  ShardAdmin& Admin(const std::string& shard) {
    const std::string& address = map_->AddressOf(shard);
    std::unique_ptr<ShardAdmin>& admin = admins_by_address_[address];
    if (admin == nullptr) admin = admins_(address);
    return *admin;
  }

  void Step(std::string what) { report_.steps.push_back(std::move(what)); }

  absl::StatusOr<MoveReport> Done(const char* outcome) {
    report_.outcome = outcome;
    report_.epoch = map_->epoch();
    return report_;
  }

  const MoveOptions& o_;
  MapStore& store_;
  const ShardAdminFactory& admins_;
  Clock& clock_;
  std::unique_ptr<SlotMap> map_;  // the map this attempt works under
  uint64_t owned_epoch_ = 0;      // the last epoch this run wrote
  bool started_ = false;          // this run froze or took over the move
  std::string from_;
  std::map<std::string, std::unique_ptr<ShardAdmin>> admins_by_address_;
  MoveReport report_;
};

}  // namespace

absl::StatusOr<MoveReport> MoveSlots(const MoveOptions& options, MapStore& store,
                                     const ShardAdminFactory& admins, Clock& clock) {
  if (options.first > options.last || options.last >= kSlotCount) {
    return absl::InvalidArgumentError(absl::StrCat("slots: ", options.first, "-", options.last,
                                                   " is not a range within 0-",
                                                   kSlotCount - 1));
  }
  if (!options.abort && options.to.empty()) {
    return absl::InvalidArgumentError("to: the shard the slots move to is required");
  }
  if (options.page_records < 1 || options.page_records > 1000) {
    return absl::InvalidArgumentError("page_records: 1..1000");
  }
  if (options.max_lost_races < 0 || options.max_lost_races > 100) {
    return absl::InvalidArgumentError("max_lost_races: 0..100");
  }
  return Move(options, store, admins, clock).Run();
}

}  // namespace eonce
