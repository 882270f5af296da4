// MoveSlots: one resumable step that moves a run of slots to another shard, on the
// coordination store (common/coord/map_store.h) and the shards' admin (shard_admin.h).
//
// The slot map in the store is the move's state. Every change is one compare-and-swap on
// the epoch this run read (the predecessor): of two runs that start from one epoch, one
// wins each step and the other re-reads and goes on from what the store says, so the map
// never forks. The steps of a run [first, last] from F to T:
//   1. freeze   the run is put in migration. T and F are told at once (AdoptSlotMap); F's
//               adoption answers once no command still runs on the run. Where F cannot be
//               told, the move waits until F published (its presence's held_epoch) that it
//               holds and drained the freeze. The run's commands are refused as retryable
//               (SLOT_MIGRATING) meanwhile: this is the pause they see.
//   2. clear    T drops whatever it holds of the run: the leftovers of an aborted copy.
//   3. copy     F's records and business rows of the run are exported page by page and
//               imported by T, which refuses an import unless the map it holds moves the
//               run to it and has not flipped.
//   4. flip     T owns the run; T adopts the map first, then F.
//   5. drop     F deletes its copy (its business fences the run first).
//   6. release  the migration entry goes; every shard is told (best effort: the others
//               learn it from the store).
// The copy belongs to the run whose compare-and-swap wrote the frozen epoch: a run that
// resumes a freeze it did not write first takes it over (writes the same map again, one
// epoch on), so that a flip can only follow a clear and a copy done under its epoch.
// `abort` rolls back a move that has not flipped (FAILED_PRECONDITION ALREADY_FLIPPED
// after: finish it instead); T's partial copy is dropped where T is reachable, else by the
// next move's clear (and the business fences it meanwhile).
//
// The business's rows of the run move with the records (eonce.v1.SlotData): the old
// owner's business raises its per-slot fence before it exports and before it drops, so a
// late write of the old owner is refused rather than lost.
//
// A record written before the sidecar kept each record's entity has no slot ("unplaced");
// a move that meets one rolls back unless `allow_unplaced` says such records may stay
// behind (a duplicate of their command would then be applied again on the new owner).
#ifndef EONCE_TOOLS_RESHARD_MOVER_H_
#define EONCE_TOOLS_RESHARD_MOVER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/base/clock.h"
#include "common/coord/map_store.h"
#include "tools/reshard/shard_admin.h"

namespace eonce {

struct MoveOptions {
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
  // Where the old owner cannot be told a step, how long to wait for its acknowledgement in
  // the store, asking every ack_poll_ms.
  int64_t ack_timeout_ms = 30'000;
  int64_t ack_poll_ms = 200;
  // Compare-and-swaps lost to another run before this one gives up (ABORTED CONTENDED).
  int max_lost_races = 8;
  int page_records = 500;
  // For tests and drills: stop after "freeze", "copy", "flip" or "drop", as if the tool
  // had died there; the next run goes on.
  std::string stop_after;
};

struct MoveReport {
  std::string outcome;  // "moved", "already there", "rolled back", "stopped after <step>"
  uint64_t epoch = 0;   // of the store's map at the end
  int64_t copied = 0;       // records
  int64_t copied_rows = 0;  // the business's rows (eonce.v1.SlotData), where it keeps them
  int64_t dropped = 0;
  int64_t unplaced = 0;
  int lost_races = 0;  // compare-and-swaps another run won first
  // From the freeze held by the old owner to the flip held by the new one, in this run:
  // how long the run's commands were refused. -1 when this run did not do both.
  int64_t frozen_ms = -1;
  std::vector<std::string> steps;  // what this run did, in order
};

absl::StatusOr<MoveReport> MoveSlots(const MoveOptions& options, MapStore& store,
                                     const ShardAdminFactory& admins, Clock& clock);

}  // namespace eonce

#endif  // EONCE_TOOLS_RESHARD_MOVER_H_
