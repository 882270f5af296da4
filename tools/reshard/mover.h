// MoveSlots: one resumable, idempotent step that moves a run of slots to another shard.
//
// The slot map file is the move's state, changed only by compare-and-set, one epoch at a
// time:
//   1. freeze   the run is put in migration (BeginMove). The old and new owners adopt the
//               map; the old owner's adoption answers once no command still runs on the
//               run, so nothing more is written there. The run's commands are refused as
//               retryable meanwhile (SLOT_MIGRATING): this is the pause they see.
//   2. copy     the old owner's records of the run are exported page by page and imported
//               by the new owner (each import synced before it answers).
//   3. flip     the new owner owns the run (FinishMove); it adopts the map first, then the
//               old owner: at every epoch exactly one shard takes the run's commands.
//   4. release  once the new owner holds the records and takes the run, the old owner
//               drops its copy, and the migration entry goes (ReleaseMove).
// Run again after a crash at any point, it reads the file, and the map each shard holds
// (a newer one wins and is written to the file: a step's map may have reached the
// sidecars but not the file, e.g. a ConfigMap written back only at the end), and goes on
// from the step it finds: a frozen run is adopted, copied and flipped (copying twice writes the same
// records), a flipped one released. `abort` rolls back a move that has not flipped: the
// old owner keeps the run, and the new owner's partial copy is dropped.
//
// A record written before the sidecar kept each record's entity has no slot ("unplaced");
// a move that meets one rolls back unless `allow_unplaced` says such records may stay
// behind (a duplicate of their command would then be applied again on the new owner).
//
// What moves is the sidecar's idempotency records: the business's own data must be where
// every shard reaches it (a shared database). A business that keeps its data in the pod
// (services/inbox) cannot be moved by this step yet.
#ifndef EONCE_TOOLS_RESHARD_MOVER_H_
#define EONCE_TOOLS_RESHARD_MOVER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/clock.h"
#include "tools/reshard/shard_admin.h"

namespace eonce {

struct MoveOptions {
  std::string map_file;
  uint32_t first = 0;
  uint32_t last = 0;
  std::string to;          // the shard the run moves to
  std::string to_address;  // needed when `to` is not in the map yet (a new shard)
  bool abort = false;
  bool allow_unplaced = false;
  // Each adoption by the old owner waits this long for the run's commands to end, and is
  // asked again up to drain_attempts times.
  int64_t drain_timeout_ms = 10'000;
  int drain_attempts = 6;
  int page_records = 500;
  // For tests and drills: stop after "freeze", "copy", "flip" or "drop", as if the tool
  // had died there; the next run goes on.
  std::string stop_after;
};

struct MoveReport {
  std::string outcome;  // "moved", "already there", "rolled back", "stopped after <step>"
  uint64_t epoch = 0;   // of the map file at the end
  int64_t copied = 0;       // records
  int64_t copied_rows = 0;  // the business's rows (eonce.v1.SlotData), where it keeps them
  int64_t dropped = 0;
  int64_t unplaced = 0;
  // From the freeze held by the old owner to the flip held by the new one, in this run:
  // how long the run's commands were refused. -1 when this run did not do both.
  int64_t frozen_ms = -1;
  std::vector<std::string> steps;  // what this run did, in order
};

absl::StatusOr<MoveReport> MoveSlots(const MoveOptions& options, const ShardAdminFactory& admins,
                                     Clock& clock);

}  // namespace eonce

#endif  // EONCE_TOOLS_RESHARD_MOVER_H_
