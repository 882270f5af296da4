// OutboxStore: the agent's durable outbox in RocksDB.
//
// Column families:
//   records   command id -> OutboxRecord (framed; acked and other final records are
//             dropped after the forensic retention by the shared TTL filter)
//   states    [state][enqueue seq][command id] -> "" : listing by state in enqueue
//             order, and the oldest waiting record in one seek
//   lanes     [entity]\0[enqueue seq] -> command id : per-entity enqueue order, also
//             held in memory (LaneIndex) so that lane questions need no iterator
//   due       no longer written (opened so that stores of earlier versions open; emptied
//             at open). The due queue is in memory (DueIndex), rebuilt at open from the
//             waiting records: only the head of each entity's lane is due, so a blocked
//             lane costs nothing and the replayer never starves other entities.
//   meta      the credential, so a revocation survives a restart
//   payloads  command id -> the command's request bytes (its payload), when longer than
//             kInlinePayloadBytes, while the record may still be sent: a transition then
//             rewrites only the record's state, not the payload. A shorter payload stays
//             in the record. A record that is final and releases its lane carries its
//             payload again (moved back by that transition), so that retention drops
//             both together; a requeue moves it out again. Records of earlier versions
//             carry theirs and move it out at their next transition.
//
// Every change of a record is one atomic WriteBatch with all of its index entries.
// Changes are serialized per entity lane and per command id (striped locks, both taken
// in one call), so promoting the next command of a lane never races an Enqueue to it;
// other entities change in parallel. Insert (and a synced Mutate) is durable before it
// returns, so Enqueue never says yes to something a crash can lose; the fsync is awaited
// after the locks are released, and calls that wait together share it. An insert's batch
// is written by the store's committer thread with the others of its group
// (InsertWhenDurable), so an Enqueue's thread never waits on RocksDB's write queue.
// Thread-safe. The RocksStore must outlive it.
#ifndef EONCE_OUTBOX_AGENT_STORE_OUTBOX_STORE_H_
#define EONCE_OUTBOX_AGENT_STORE_OUTBOX_STORE_H_

#include <array>
#include <atomic>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/base/clock.h"
#include "common/store/rocks.h"
#include "common/base/striped_lock.h"
#include "common/store/ttl.h"
#include "eonce/v1/agent.pb.h"
#include "outbox_agent/store/due_index.h"
#include "outbox_agent/store/lane_index.h"
#include "outbox_agent/store/states.h"

namespace eonce {

using OutboxRecord = v1::OutboxRecord;
using OutboxState = v1::OutboxState;

// The retry hint of an Enqueue refused because the outbox is full.
inline constexpr int64_t kOutboxFullRetryAfterMs = 1'000;

// The lane of a record: its entity ("type/id"). Commands of one lane go in enqueue order.
std::string LaneOf(const OutboxRecord& record);

struct OutboxStoreOptions {
  // How long a final record is kept for forensics before compaction drops it.
  int64_t forensic_retention_ms = 30LL * 24 * 3600 * 1000;
  // The most records that may be waiting (not final); Enqueue past it is refused.
  int64_t max_pending_records = 1'000'000;
  // How many transitions a record remembers.
  int history_limit = 16;
};

// Waits for an operator: a dead letter, or an expired record that was sent (its outcome
// was never known). It keeps blocking its entity's later commands, which may depend on
// it, and is never dropped by age.
bool AwaitsOperator(const OutboxRecord& record);
// Releases the entity's lane, so the next command of the entity may go.
bool ReleasesLane(const OutboxRecord& record);

class OutboxStore {
 public:
  struct Filters {
    explicit Filters(Clock& clock)
        : factory(std::make_shared<TtlCompactionFilterFactory>(clock, nullptr, stats)) {}
    TtlStats stats;
    std::shared_ptr<TtlCompactionFilterFactory> factory;
  };
  static std::vector<ColumnFamilySpec> ColumnFamilies(Filters& filters);

  OutboxStore(RocksStore& store, Clock& clock, OutboxStoreOptions options);

  // Adds a new record for `command` (complete: id, key, hash set) in QUEUED, or returns the
  // existing one (second = false) when the id is known with the same payload hash.
  // ALREADY_EXISTS for the same id with another payload; RESOURCE_EXHAUSTED when full.
  // Returns once the record is durable, and makes it due (MarkDurable).
  using Inserted = std::pair<OutboxRecord, bool>;
  absl::StatusOr<Inserted> Insert(const v1::Command& command);
  // Insert without blocking the caller: the record is checked and placed in its lane at
  // once, its batch goes to the store's committer (RocksStore::WriteWhenDurable), and
  // `done` is called once it is durable, from the committer thread (at once for an answer
  // that needs no write). A second insert of the id meanwhile finds the record and is
  // answered when the first one is; until its batch is written, Get, List and Mutate do
  // not see it (nothing has acknowledged it). A batch that could not be written is undone
  // in memory too. A new record is not due before MarkDurable: the caller announces it
  // first, then makes it due.
  using InsertFn = std::function<void(absl::StatusOr<Inserted>)>;
  // `sends_at_once`: the agent would send the command at once were it its lane's head
  // (core/send_outlook.h). A new record that heads its lane is then written with ever_sent
  // set, in the same synced write, so its first claim needs no sync: a record marked but
  // never sent is only treated as maybe sent, never the reverse.
  void InsertWhenDurable(const v1::Command& command, InsertFn done, bool sends_at_once = false);
  // The new record `command_id` is durable: from now on it may be due.
  void MarkDurable(const std::string& command_id);
  // Calls `done` once every write made so far is durable (RocksStore::WhenDurable).
  void WhenDurable(RocksStore::DurableFn done) { store_.WhenDurable(std::move(done)); }
  // Returns once every write made so far is durable, sharing the fsync with whoever waits
  // at the same moment (RocksStore::AwaitDurable): for unsynced moves (MutateMany) that
  // must be durable before the caller goes on.
  absl::Status AwaitDurable() { return store_.AwaitDurable(); }

  // The record with its command's payload.
  absl::StatusOr<std::optional<OutboxRecord>> Get(const std::string& command_id);
  // The record as stored: its command's request is empty while the payload is kept apart.
  // For readers of the state alone.
  absl::StatusOr<std::optional<OutboxRecord>> GetState(const std::string& command_id);

  // Reads the record, lets `change` edit it, and writes the result with its index entries
  // in one batch. `change` returning an error aborts with that error and writes nothing.
  // `why` goes into the history. `change` sees the record without its payload (as
  // GetState reads it) and must leave the command as it is. Returns the record as
  // written, with its payload.
  using ChangeFn = std::function<absl::Status(OutboxRecord* record)>;
  absl::StatusOr<OutboxRecord> Mutate(const std::string& command_id, const std::string& why,
                                      const ChangeFn& change, bool sync);
  // Several Mutates (not synced: see AwaitDurable) in as few writes as they allow: the changes of distinct
  // commands and entities go in one batch, written once, under all of their locks; a
  // change of a command or entity already in the batch goes in the next one. Each change
  // stands alone: one that fails or aborts writes nothing and leaves the others be. The
  // results come in the changes' order, each as its Mutate would have returned it, but
  // with its payload only where the change asks for it.
  struct Change {
    std::string command_id;
    std::string why;
    ChangeFn change;
    bool with_payload = false;  // the result carries the payload (to send it)
  };
  std::vector<absl::StatusOr<OutboxRecord>> MutateMany(const std::vector<Change>& changes);

  // Command ids whose next attempt is due at `now_ms`, earliest first.
  absl::StatusOr<std::vector<std::string>> Due(int64_t now_ms, int limit);
  // The earliest time anything is due; nullopt when nothing is.
  std::optional<int64_t> NextDueMs();
  // `command_id` is looked at again no sooner than `not_before_ms`: in memory only (the
  // record keeps its time, and a restart or its next write restores it), and only ever a
  // delay (DueIndex::Postpone). For a head that is due but cannot be sent yet, so that it
  // stops sorting ahead of the heads that can.
  void PostponeDue(const std::string& command_id, int64_t not_before_ms);

  // Records in command id order after `after`; at most ListLimit(limit) of them.
  absl::StatusOr<std::vector<OutboxRecord>> List(OutboxState state, const std::string& after,
                                                 int limit);
  // The page size List uses for `limit`: 100 when unset, at most 1000.
  static size_t ListLimit(int limit);
  std::array<int64_t, v1::OutboxState_ARRAYSIZE> CountsByState() const;
  // The age of the oldest record waiting to be sent (queued, retryable or unknown).
  absl::StatusOr<int64_t> OldestWaitingAgeMs();

  // After a restart: CLAIMED and SENDING records lost their worker, so their outcome is
  // unknown. Moves them to UNKNOWN, due now. Returns how many.
  absl::StatusOr<int> RecoverAfterRestart();

  // The credential replay runs under, kept across restarts.
  absl::Status SaveCredential(int64_t epoch, bool revoked);
  absl::StatusOr<std::pair<int64_t, bool>> LoadCredential();

  absl::Status CompactAll();

 private:
  // The entity lane to lock for a change of `command_id`.
  absl::StatusOr<std::string> LaneToLock(const std::string& command_id);
  // One change of MutateMany, read and made under its locks and added to `batch`, and
  // what the memory must learn once the batch is written. A change that fails adds
  // nothing to the batch.
  struct Prepared {
    OutboxState before_state = v1::OUTBOX_STATE_UNSPECIFIED;
    OutboxRecord after;
    bool released = false;  // the record left its lane
    bool rejoined = false;  // the record came back into its lane
    std::optional<std::pair<std::string, int64_t>> next_due;  // the lane's new head
  };
  absl::StatusOr<Prepared> PrepareLocked(const Change& change, rocksdb::WriteBatch* batch);
  void ApplyWritten(const std::string& command_id, const Prepared& prepared);
  void AddIndexes(rocksdb::WriteBatch* batch, const OutboxRecord* before,
                  const OutboxRecord& after);
  // The first other command of the record's lane, and whether none comes before it.
  // Both read lanes_, so the caller holds the lane's lock.
  std::optional<std::string> NextInLane(const OutboxRecord& record) const;
  bool IsLaneHead(const OutboxRecord& record) const;
  // When compaction may drop the record (0: never), and the record framed with it.
  int64_t DropAt(const OutboxRecord& record) const;
  std::string Encode(const OutboxRecord& record) const;
  // The payload kept apart for `command_id`, if any.
  absl::StatusOr<std::optional<std::string>> ReadPayload(const std::string& command_id);
  // Moves a payload longer than kInlinePayloadBytes out of `record` into its own entry in
  // `batch`, and returns it; leaves a shorter one where it is.
  std::optional<std::string> MovePayloadOut(const std::string& command_id,
                                            OutboxRecord* record, rocksdb::WriteBatch* batch);
  // Rebuilds due_ from the records in waiting states (lanes_ first).
  void RebuildDue();
  // The records in waiting states (the outbox's limit counts them).
  int64_t WaitingCount() const;
  // The command after `record` in its lane and when it is due; none when there is no next
  // command or it is not waiting. The caller holds the lane's lock.
  absl::StatusOr<std::optional<std::pair<std::string, int64_t>>> NextDue(
      const OutboxRecord& record);
  // Get, or the record of an insert whose batch is not written yet.
  absl::StatusOr<std::optional<OutboxRecord>> GetIncludingPending(const std::string& command_id);
  // Called back by the committer for the insert of `record`: answers it and the inserts
  // of the same id that came meanwhile; undoes the memory of a batch never written.
  void FinishInsert(const OutboxRecord& record, absl::Status status, bool written,
                    const InsertFn& done);

  RocksStore& store_;
  Clock& clock_;
  const OutboxStoreOptions options_;
  StripedLocks locks_;
  LaneIndex lanes_;  // the lanes column family, in memory
  DueIndex due_;     // the due queue, in memory only
  std::atomic<uint64_t> next_seq_{1};
  std::array<std::atomic<int64_t>, v1::OutboxState_ARRAYSIZE> counts_{};
  // Inserts whose batch is queued and not yet written, each with the inserts of the same
  // id waiting for it. Bounded by the inserts in flight.
  struct Pending {
    OutboxRecord record;
    std::vector<InsertFn> followers;
  };
  absl::Mutex pending_mu_;
  absl::flat_hash_map<std::string, Pending> pending_ ABSL_GUARDED_BY(pending_mu_);
};

}  // namespace eonce

#endif  // EONCE_OUTBOX_AGENT_STORE_OUTBOX_STORE_H_
