// Slot moves in a sharded world: two sidecars (shards s0 and s1) in front of the business,
// and runs of slots that hold accounts moved between them during the faults by the real
// mover (tools/reshard/mover.h). Its calls to a shard go straight to that sidecar's slot
// gate and record store, as its gRPC admin service would; each may find the sidecar down,
// or crash it before or after its work (faults at every step of a move), and a run of the
// mover may stop after any step, as if killed. A move is run again until it finishes.
#include <algorithm>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/slots.h"
#include "common/status.h"
#include "dedupe_sidecar/slot_transfer.h"
#include "tests/sim/world.h"
#include "tools/reshard/mover.h"

namespace eonce::sim::internal {

// The chance that a step of a move crashes its sidecar, before or after its work.
inline constexpr double kMoveStepCrash = 0.05;
// The chance that a run of the mover stops after one of its steps, as if killed.
inline constexpr double kMoverStops = 0.3;
inline constexpr int kMaxMoveAttempts = 500;

class SimShardAdmin : public ShardAdmin {
 public:
  SimShardAdmin(World& w, int shard) : w_(w), shard_(shard), node_(SidecarNode(shard)) {}

  absl::StatusOr<uint64_t> Adopt(const SlotMap& map, int64_t /*drain_timeout_ms*/) override {
    EONCE_RETURN_IF_ERROR(Before("adopt"));
    // The drain is not waited for here: the world runs on this thread, so running work
    // can only finish between runs of the mover, which asks again.
    absl::StatusOr<uint64_t> held = Sidecar().gate->Adopt(map, /*drain_timeout_ms=*/1);
    EONCE_RETURN_IF_ERROR(After("adopt"));
    return held;
  }

  absl::StatusOr<v1::ExportSlotsResponse> Export(const v1::ExportSlotsRequest& request) override {
    EONCE_RETURN_IF_ERROR(Before("export"));
    auto page = ExportSlots(*Sidecar().gate, *Sidecar().records, request);
    EONCE_RETURN_IF_ERROR(After("export"));
    return page;
  }

  absl::StatusOr<int64_t> Import(const v1::ImportSlotsRequest& request) override {
    EONCE_RETURN_IF_ERROR(Before("import"));
    // The negative control: the records are not copied, yet the import says they were.
    if (w_.options_.skip_record_copy) return static_cast<int64_t>(request.records_size());
    auto imported = ImportSlots(*Sidecar().gate, *Sidecar().records, request);
    if (!imported.ok()) return imported.status();
    EONCE_RETURN_IF_ERROR(After("import"));
    return imported->imported();
  }

  absl::StatusOr<int64_t> Drop(uint32_t first, uint32_t last, uint64_t epoch) override {
    EONCE_RETURN_IF_ERROR(Before("drop"));
    v1::DropSlotsRequest request;
    request.set_first_slot(first);
    request.set_last_slot(last);
    request.set_epoch(epoch);
    auto dropped = DropSlots(*Sidecar().gate, *Sidecar().records, request);
    if (!dropped.ok()) return dropped.status();
    EONCE_RETURN_IF_ERROR(After("drop"));
    return dropped->dropped();
  }

  absl::StatusOr<v1::SlotMap> Held() override {
    if (!w_.node(node_).up) return absl::UnavailableError("sidecar down");
    if (Sidecar().gate->map() == nullptr) return absl::UnavailableError("no map yet");
    return Sidecar().gate->map()->proto();
  }

 private:
  World::Sidecar& Sidecar() { return w_.sidecars_[shard_]; }

  absl::Status Crash(const char* when, const char* step) {
    w_.Trace(absl::StrCat("crash ", w_.node(node_).name, " ", when, " the move's ", step));
    w_.Crash(node_);
    return absl::UnavailableError(absl::StrCat("the sidecar crashed ", when, " ", step));
  }
  absl::Status Before(const char* step) {
    if (!w_.node(node_).up) return absl::UnavailableError("sidecar down");
    if (w_.faults_active_ && w_.move_random_.Chance(kMoveStepCrash)) return Crash("before", step);
    return absl::OkStatus();
  }
  absl::Status After(const char* step) {
    if (w_.faults_active_ && w_.move_random_.Chance(kMoveStepCrash)) return Crash("after", step);
    return absl::OkStatus();
  }

  World& w_;
  const int shard_;
  const int node_;
};

absl::Status World::WriteFirstSlotMap() {
  std::vector<v1::ShardInfo> shards(2);
  for (int i = 0; i < 2; ++i) {
    shards[i].set_id(absl::StrCat("s", i));
    shards[i].set_address(absl::StrCat("sim:s", i));
  }
  EONCE_ASSIGN_OR_RETURN(SlotMap map, SlotMap::Even(shards));
  return map_store_.CompareAndSwap(0, map).status();
}

int World::OwnerShard(const v1::Command& command) {
  absl::StatusOr<SlotMap> map = map_store_.Read();
  if (!map.ok()) return 0;
  return map->OwnerOf(SlotOfCommand(command)) == "s1" ? 1 : 0;
}

void World::ScheduleMoves() {
  absl::StatusOr<SlotMap> map = map_store_.Read();
  if (!map.ok()) return;
  // Runs of a few slots around accounts' slots, disjoint, each within one owner's range.
  const int wanted = 1 + static_cast<int>(move_random_.Uniform(3));
  for (int tries = 0; tries < 20 && static_cast<int>(moves_.size()) < wanted; ++tries) {
    const int account = static_cast<int>(move_random_.Uniform(config_.accounts));
    const uint32_t slot = SlotOf(kTenant, "account", absl::StrCat("a", account));
    Move move;
    move.first = slot >= 2 ? slot - 2 : 0;
    move.last = std::min(slot + 2, kSlotCount - 1);
    while (map->OwnerOf(move.first) != map->OwnerOf(slot)) ++move.first;
    while (map->OwnerOf(move.last) != map->OwnerOf(slot)) --move.last;
    bool overlaps = false;
    for (const Move& other : moves_) {
      overlaps |= move.first <= other.last && other.first <= move.last;
    }
    if (overlaps) continue;
    moves_.push_back(move);
  }
  for (size_t i = 0; i < moves_.size(); ++i) {
    const int64_t at = 500 + static_cast<int64_t>(move_random_.Uniform(11'000));
    loop_.After(at, [this, i] { RunMove(static_cast<int>(i)); });
  }
}

void World::RunMove(int index) {
  Move& move = moves_[index];
  if (move.done) return;
  if (++move.attempts > kMaxMoveAttempts) {
    Violation(absl::StrCat("liveness: the move of slots ", move.first, "-", move.last,
                           " never finished"));
    move.done = true;
    return;
  }
  absl::StatusOr<SlotMap> map = map_store_.Read();
  if (!map.ok()) {
    Violation(absl::StrCat("the slot map cannot be read: ", map.status().message()));
    move.done = true;
    return;
  }
  MoveOptions options;
  options.first = move.first;
  options.last = move.last;
  // The run goes to the other shard, once: the target is fixed by its first run.
  if (move.to.empty()) move.to = map->OwnerOf(move.first) == "s0" ? "s1" : "s0";
  options.to = move.to;
  options.drain_attempts = 1;
  options.page_records = 1 + static_cast<int>(move_random_.Uniform(3));
  if (faults_active_ && move_random_.Chance(kMoverStops)) {
    const char* steps[] = {"freeze", "copy", "flip", "drop"};
    options.stop_after = steps[move_random_.Uniform(4)];
  }
  ShardAdminFactory admins = [this](const std::string& address) -> std::unique_ptr<ShardAdmin> {
    return std::make_unique<SimShardAdmin>(*this, address == "sim:s1" ? 1 : 0);
  };
  absl::StatusOr<MoveReport> report = MoveSlots(options, map_store_, admins, clock_);
  Trace(absl::StrCat("move ", move.first, "-", move.last, " to ", move.to, ": ",
                     report.ok() ? absl::StrCat(report->outcome, " at epoch ", report->epoch,
                                                ", copied ", report->copied, ", dropped ",
                                                report->dropped)
                               : std::string(report.status().message())));
  if (report.ok() && (report->outcome == "moved" || report->outcome == "already there")) {
    move.done = true;
    return;
  }
  loop_.After(50 + static_cast<int64_t>(move_random_.Uniform(300)),
              [this, index] { RunMove(index); });
}

}  // namespace eonce::sim::internal
