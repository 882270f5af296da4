#include "tools/reshard/mover.h"

#include <map>
#include <optional>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/slot_map_file.h"
#include "common/status.h"

namespace eonce {
namespace {

class Move {
 public:
  Move(const MoveOptions& options, const ShardAdminFactory& admins, Clock& clock,
       SlotMap map)
      : o_(options), admins_(admins), clock_(clock), map_(std::move(map)) {}

  absl::StatusOr<MoveReport> Run() {
    EONCE_RETURN_IF_ERROR(CatchUp());
    absl::StatusOr<v1::SlotMigration> move = MigrationOf(map_, o_.first, o_.last);
    if (o_.abort) return RollBack(move);
    if (!move.ok()) {
      if (AllOwnedBy(o_.to)) return Done("already there");
      EONCE_ASSIGN_OR_RETURN(SlotMap frozen, BeginMove(map_, o_.first, o_.last, o_.to,
                                                       o_.to_address));
      EONCE_RETURN_IF_ERROR(Publish(std::move(frozen), "freeze"));
      move = MigrationOf(map_, o_.first, o_.last);
      if (!move.ok()) return move.status();
    }
    from_ = move->from_shard();
    if (!move->flipped()) {
      EONCE_RETURN_IF_ERROR(AdoptAt(o_.to));
      EONCE_RETURN_IF_ERROR(AdoptDrained(from_));
      const int64_t frozen_at = clock_.NowMs();
      if (o_.stop_after == "freeze") return Done("stopped after freeze");
      EONCE_RETURN_IF_ERROR(Copy());
      if (report_.unplaced > 0 && !o_.allow_unplaced) {
        absl::StatusOr<MoveReport> rolled = RollBack(move);
        if (!rolled.ok()) return rolled.status();
        return Error(absl::StatusCode::kFailedPrecondition, "UNPLACED_RECORDS",
                     absl::StrCat(report_.unplaced, " records on shard ", from_,
                                  " name no entity (written before the sidecar kept it), so "
                                  "their slot is unknown; the move was rolled back. Wait until "
                                  "they expire, or move with --allow_unplaced"));
      }
      if (o_.stop_after == "copy") return Done("stopped after copy");
      EONCE_ASSIGN_OR_RETURN(SlotMap flipped, FinishMove(map_, o_.first, o_.last));
      EONCE_RETURN_IF_ERROR(Publish(std::move(flipped), "flip"));
      // The new owner first: once the old one refuses with the new epoch, callers find
      // the new owner already taking the run.
      EONCE_RETURN_IF_ERROR(AdoptAt(o_.to));
      report_.frozen_ms = clock_.NowMs() - frozen_at;
      EONCE_RETURN_IF_ERROR(AdoptAt(from_));
      if (o_.stop_after == "flip") return Done("stopped after flip");
    }
    // Release: the new owner's imports were synced before they answered, and it holds the
    // flipped map (adopted again here, for a run that resumes at this step).
    EONCE_RETURN_IF_ERROR(AdoptAt(o_.to));
    EONCE_RETURN_IF_ERROR(AdoptAt(from_));
    EONCE_ASSIGN_OR_RETURN(int64_t dropped, Admin(from_).Drop(o_.first, o_.last));
    report_.dropped += dropped;
    Step(absl::StrCat("dropped ", dropped, " records on ", from_));
    if (o_.stop_after == "drop") return Done("stopped after drop");
    EONCE_ASSIGN_OR_RETURN(SlotMap released, ReleaseMove(map_, o_.first, o_.last));
    EONCE_RETURN_IF_ERROR(Publish(std::move(released), "release"));
    EONCE_RETURN_IF_ERROR(AdoptAt(o_.to));
    EONCE_RETURN_IF_ERROR(AdoptAt(from_));
    AdoptElsewhere();
    return Done("moved");
  }

 private:
  // Takes the newest map any shard of the file's map holds, if newer than the file.
  absl::Status CatchUp() {
    std::optional<SlotMap> newest;
    for (const v1::ShardInfo& shard : map_.proto().shards()) {
      absl::StatusOr<v1::SlotMap> held = Admin(shard.id()).Held();
      if (!held.ok()) continue;  // a shard that is down cannot be newer than the rest
      absl::StatusOr<SlotMap> map = SlotMap::FromProto(std::move(*held));
      if (map.ok() && map->epoch() > (newest ? newest->epoch() : map_.epoch())) {
        newest = std::move(*map);
      }
    }
    if (!newest.has_value()) return absl::OkStatus();
    return Publish(std::move(*newest), "caught up with the shards");
  }

  absl::StatusOr<MoveReport> RollBack(const absl::StatusOr<v1::SlotMigration>& move) {
    if (!move.ok()) return Done("nothing to roll back");
    if (move->flipped()) {
      return Error(absl::StatusCode::kFailedPrecondition, "ALREADY_FLIPPED",
                   absl::StrCat("slots ", o_.first, "-", o_.last, " already belong to ",
                                move->to_shard(), ": run the move again to finish it"));
    }
    from_ = move->from_shard();
    const std::string to = move->to_shard();
    EONCE_ASSIGN_OR_RETURN(SlotMap back, AbortMove(map_, o_.first, o_.last));
    EONCE_RETURN_IF_ERROR(Publish(std::move(back), "roll back"));
    EONCE_RETURN_IF_ERROR(AdoptAt(from_));
    EONCE_RETURN_IF_ERROR(AdoptAt(to));
    EONCE_ASSIGN_OR_RETURN(int64_t dropped, Admin(to).Drop(o_.first, o_.last));
    report_.dropped += dropped;
    Step(absl::StrCat("dropped ", dropped, " copied records on ", to));
    AdoptElsewhere();
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

  // Writes `next` to the file if it still holds the map this run read, and goes on from it.
  absl::Status Publish(SlotMap next, const char* step) {
    EONCE_RETURN_IF_ERROR(CompareAndSetSlotMapFile(o_.map_file, map_.epoch(), next));
    map_ = std::move(next);
    Step(absl::StrCat(step, ": epoch ", map_.epoch()));
    return absl::OkStatus();
  }

  absl::Status AdoptAt(const std::string& shard) {
    absl::StatusOr<uint64_t> held = Admin(shard).Adopt(map_, o_.drain_timeout_ms);
    if (!held.ok()) {
      return absl::Status(held.status().code(),
                          absl::StrCat("shard ", shard, " did not adopt epoch ", map_.epoch(),
                                       ": ", held.status().message()));
    }
    return absl::OkStatus();
  }

  // The old owner's adoption of the freeze, asked until no command runs on the run.
  absl::Status AdoptDrained(const std::string& shard) {
    absl::Status last;
    for (int attempt = 0; attempt < std::max(1, o_.drain_attempts); ++attempt) {
      last = AdoptAt(shard);
      if (last.code() != absl::StatusCode::kDeadlineExceeded) return last;
    }
    return last;
  }

  // Shards that neither give nor take the run learn the map from the file later; telling
  // them now only spares their callers a redirect, so a shard that is down does not stop
  // the move.
  void AdoptElsewhere() {
    for (const v1::ShardInfo& shard : map_.proto().shards()) {
      if (shard.id() == from_ || shard.id() == o_.to) continue;
      if (!Admin(shard.id()).Adopt(map_, 1).ok()) {
        Step(absl::StrCat("shard ", shard.id(), " will read epoch ", map_.epoch(),
                          " from the file"));
      }
    }
  }

  bool AllOwnedBy(const std::string& shard) const {
    for (uint32_t slot = o_.first; slot <= o_.last && slot < kSlotCount; ++slot) {
      if (map_.OwnerOf(slot) != shard) return false;
    }
    return o_.first <= o_.last;
  }

  ShardAdmin& Admin(const std::string& shard) {
    const std::string& address = map_.AddressOf(shard);
    std::unique_ptr<ShardAdmin>& admin = admins_by_address_[address];
    if (admin == nullptr) admin = admins_(address);
    return *admin;
  }

  void Step(std::string what) { report_.steps.push_back(std::move(what)); }

  absl::StatusOr<MoveReport> Done(const char* outcome) {
    report_.outcome = outcome;
    report_.epoch = map_.epoch();
    return report_;
  }

  const MoveOptions& o_;
  const ShardAdminFactory& admins_;
  Clock& clock_;
  SlotMap map_;
  std::string from_;
  std::map<std::string, std::unique_ptr<ShardAdmin>> admins_by_address_;
  MoveReport report_;
};

}  // namespace

absl::StatusOr<MoveReport> MoveSlots(const MoveOptions& options, const ShardAdminFactory& admins,
                                     Clock& clock) {
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
  EONCE_ASSIGN_OR_RETURN(SlotMap map, ReadSlotMapFile(options.map_file));
  return Move(options, admins, clock, std::move(map)).Run();
}

}  // namespace eonce
