// Inbox: the inbox pattern and the effect ledger for a C++ business service.
//
// A service behind the sidecar may see the same command twice (a recovery forward, a
// replay after a lost answer). The inbox makes the second call harmless: the command id
// and its result are written in the same RocksDB WriteBatch as the effect, and a repeat
// of the command id returns the stored result with no second effect. QueryOutcome is
// answered from the same data, so it is exact.
//
// Adopting it takes a few lines:
//
//   auto result = inbox.Run(identity, {"account/a", "account/b"},
//       [&](rocksdb::WriteBatch* batch, uint64_t seq) -> absl::StatusOr<Applied> {...});
//
// Run serializes calls that share a command id or an entity (striped locks) while it reads
// and writes; it waits for the write to be durable after it released them, so calls on
// the same account do not queue behind each other's fsync, and every call waiting at the
// same time shares one (RocksStore::WhenDurable). In legacy mode the inbox is off: every
// call applies (the effect ledger still records it, as ground truth).
//
// A key belongs to the first command that used it, with that command's payload, here as
// in the sidecar: another command id, or the same one with another payload, is refused
// with ALREADY_EXISTS (KEY_REUSED, IDEMPOTENCY_CONFLICT) and nothing is applied. The
// sidecar checks this first; the inbox checks it again because it is the commit point:
// the sidecar may forward before its own record is durable (docs/design.md, "Where the
// truth is"), and a record a power cut took back must not let a key be reused.
//
// Inbox entries expire `entry_retention_ms` after they were written (TTL compaction, and
// reads apply the same rule). Keep it at least the sidecar's forensic window, so that
// QueryOutcome can answer for every command a sidecar may still ask about.
//
// Effect sequence numbers are taken before their batch commits, and calls commit in any
// order; ListEffects shows effects only up to the highest number below which every
// taken number has committed or been given up, so a reader that tails it never skips one.
//
// Thread-safe. The RocksStore must outlive the Inbox.
#ifndef EONCE_SERVICES_INBOX_INBOX_H_
#define EONCE_SERVICES_INBOX_INBOX_H_

#include <atomic>
#include <functional>
#include <initializer_list>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/base/clock.h"
#include "common/base/fault.h"
#include "common/store/rocks.h"
#include "common/base/striped_lock.h"
#include "common/store/ttl.h"
#include "eonce/internal/records.pb.h"
#include "eonce/v1/outcome.pb.h"
#include "rocksdb/write_batch.h"
#include "services/inbox/slot_fences.h"

namespace eonce {

// Who sent a call, from the request metadata the sidecar adds (IdentityFromMetadata in
// inbox_services.h reads it; this library itself knows nothing of gRPC).
struct CallIdentity {
  std::string command_id;  // empty for a call that did not come through eonce
  std::string tenant;
  std::string actor;
  std::string idempotency_key;
  std::string payload_sha256;  // raw bytes; empty: not compared
  uint64_t fencing_token = 0;
  // The command's entity (from the sidecar's eonce-entity header); empty type: unknown.
  // The inbox files its entry under the entity's slot, so that the entry moves with it.
  std::string entity_type;
  std::string entity_id;
  // From a sharded sidecar (eonce-slot, eonce-slot-epoch): the slot the call is for and the
  // epoch of the map it was admitted by; slot_epoch 0: none. Checked against the slot's
  // fence where the effect is written (SlotFences).
  uint32_t slot = 0;
  uint64_t slot_epoch = 0;
  v1::TraceContext trace;  // W3C traceparent/tracestate metadata, checked; not identity
  // Run returns as soon as its write is in the store, before it is durable, and the caller
  // answers only once Inbox::WhenDurable says it is (RunMutation, so that no thread blocks
  // on an fsync). False: Run itself returns only once the write is durable.
  bool durability_by_caller = false;
};

// A command an effect emits, written in the effect's own batch (the transactional outbox):
// a relay sends it at least once (PullFollowUps); its command id is derived from the
// parent's and its index, so every resend is the same command.
struct FollowUp {
  std::string target_method;
  std::string request;  // the serialized request message
  std::string entity_type;
  std::string entity_id;
};

// What an apply function produced.
struct Applied {
  // The answer: OK with the response bytes, or a terminal business rejection.
  v1::CallResult result;
  // The effect to append to the ledger; none for a rejection.
  std::optional<v1::Effect> effect;
  // At most kMaxFollowUps, only with an effect, and only for a call with a command id.
  std::vector<FollowUp> follow_ups;
  // Runs once the batch is written, still under the call's locks (a business keeping
  // what it wrote in memory); not if the write failed.
  std::function<void()> on_written;
};

class Inbox {
 public:
  // 31 days: the sidecar's default forensic window (30 days) and a day to spare.
  static constexpr int64_t kDefaultEntryRetentionMs = 31LL * 24 * 3600 * 1000;

  // Column families the inbox needs in the service's store; `clock` drives the TTL
  // compaction of inbox entries and must outlive the store.
  static std::vector<ColumnFamilySpec> ColumnFamilies(Clock& clock);
  // `base` as a store holding an inbox is opened: its unsynced writes are all awaited
  // before an answer leaves (Run, RunMutation), so its log is buffered until each sync.
  static StoreOptions StoreOptionsFor(StoreOptions base = StoreOptions());

  Inbox(RocksStore& store, Clock& clock, bool legacy_mode, FaultInjector* faults = nullptr,
        int64_t entry_retention_ms = kDefaultEntryRetentionMs);
  virtual ~Inbox() = default;

  // Adds the effect's writes to `batch` and returns the answer. `effect_seq` is the
  // sequence number the effect will have in the ledger (ascending; a rejection leaves a
  // gap), so that a response can name it.
  using ApplyFn =
      std::function<absl::StatusOr<Applied>(rocksdb::WriteBatch* batch, uint64_t effect_seq)>;

  // Applies once per (tenant, command id). `entities` names what the effect touches, so
  // that calls on the same entity are serialized. Returns the new or stored result; an
  // error is an operating error (the store), a reused key (IsKeyConflict), or a refusal
  // of the call's slot (IsSlotFenced: the slot's fence is above the call's epoch; or
  // FAILED_PRECONDITION ENTITY_SLOT_MISMATCH: a row of another slot than the call's), not
  // a business rejection. Nothing is applied with any error.
  absl::StatusOr<v1::CallResult> Run(const CallIdentity& identity,
                                     std::initializer_list<absl::string_view> entities,
                                     const ApplyFn& apply);

  // The stored entry of (tenant, command id), if the command was applied.
  absl::StatusOr<std::optional<internal::InboxEntry>> Lookup(const std::string& tenant,
                                                             const std::string& command_id);

  // Calls `done` once every write made so far is durable (the store's group commit), from
  // the store's committer thread or at once; for callers of Run with durability_by_caller.
  // Every wait of the inbox goes through it. Virtual only so that a negative control can
  // skip the wait (inbox_test).
  virtual void WhenDurable(RocksStore::DurableFn done) { store_.WhenDurable(std::move(done)); }
  // The same for a unary call's handler, which may sync on its own thread when the store
  // is quiet (RocksStore::WhenDurableLeadingWhenIdle).
  void WhenDurableLeadingWhenIdle(RocksStore::DurableFn done) {
    store_.WhenDurableLeadingWhenIdle(std::move(done));
  }

  absl::StatusOr<v1::QueryOutcomeResponse> QueryOutcome(const std::string& tenant,
                                                       const std::string& command_id);

  // Effects after `after_seq`, at most `limit`. With `tenant`, only that tenant's: the
  // sidecar names the caller's tenant on every call it forwards, so a tenant never reads
  // another's effects through it. last_seq says where the next page starts (a page scans
  // at most kMaxEffectsScanned entries).
  absl::StatusOr<v1::ListEffectsResponse> ListEffects(uint64_t after_seq, int limit,
                                                      const std::string& tenant = "");
  static constexpr int kMaxEffectsScanned = 100'000;

  // --- Entity data by slot (inbox_slots.cc) ---
  // A business keeps each entity's rows through PutEntityRow, in its apply's batch: the
  // row goes to `cf` at `key`, and an index entry files it under the entity's slot, so
  // that ExportSlotData / ImportSlotData / DropSlotData move the slot's data with no code
  // of the business's own. The inbox files its own entries the same way (by the call's
  // entity). Rows of other slots under the same key are refused at import.
  // Within a Run of a call that claims a slot, a row of another slot is refused (the Run
  // fails, nothing written): a sharded sidecar admits a call by the entity it declares,
  // and a business must not write another slot's rows on its word.
  void PutEntityRow(rocksdb::WriteBatch* batch, const std::string& tenant,
                    absl::string_view entity_type, absl::string_view entity_id,
                    const std::string& cf, const std::string& key, const std::string& value);
  // The same for a row that belongs to `slot` itself (a per-slot counter).
  void PutSlotRow(rocksdb::WriteBatch* batch, uint32_t slot, const std::string& cf,
                  const std::string& key, const std::string& value);
  // Per page of ExportSlotData: rows, and bytes (what fits a message with room to spare).
  static constexpr int kMaxSlotRows = 1000;
  static constexpr size_t kMaxSlotDataBytes = 2 << 20;
  static constexpr int kMaxSlotIndexScanned = 100'000;
  absl::StatusOr<v1::ExportSlotDataResponse> ExportSlotData(
      const v1::ExportSlotDataRequest& request);
  // Export and drop raise the slots' fence to the request's epoch first (synced), import
  // is refused below it and raises it with its rows (SlotFences). Import is synced before
  // it answers; nothing is written if a row is refused.
  absl::StatusOr<v1::ImportSlotDataResponse> ImportSlotData(
      const v1::ImportSlotDataRequest& request);
  absl::StatusOr<v1::DropSlotDataResponse> DropSlotData(const v1::DropSlotDataRequest& request);
  // The sidecar owns the slots at the request's epoch: SlotFences::Hold under their locks.
  absl::StatusOr<v1::HoldSlotDataResponse> HoldSlotData(const v1::HoldSlotDataRequest& request);
  // Called after every write of ImportSlotData and DropSlotData, whatever its result: they
  // replace a business's rows without its entity locks, so what it keeps in memory of
  // them must go. Set before the inbox serves, or with nothing serving; empty: none.
  void SetSlotRowsReplaced(std::function<void()> replaced) {
    slot_rows_replaced_ = std::move(replaced);
  }

  // --- The transactional outbox (inbox_slots.cc) ---
  static constexpr int kMaxFollowUps = 16;
  static constexpr int kMaxFollowUpsPulled = 1000;
  // The oldest durable follow-ups of `tenant`.
  absl::StatusOr<v1::PullFollowUpsResponse> PullFollowUps(const std::string& tenant, int limit);
  // Deletes `tenant`'s follow-ups among `ids`; an id of another tenant is refused
  // (INVALID_ARGUMENT) and nothing is deleted.
  absl::StatusOr<v1::AckFollowUpsResponse> AckFollowUps(const std::string& tenant,
                                                       const v1::AckFollowUpsRequest& request);
  // Follow-ups written and not yet acknowledged (all tenants).
  int64_t follow_ups_pending() const { return follow_ups_pending_.load(); }
  // The command id of a parent's `index`-th follow-up.
  static std::string FollowUpCommandId(const std::string& tenant, const std::string& parent_id,
                                       int index);

  bool legacy_mode() const { return legacy_mode_; }
  const SlotFences& fences() const { return fences_; }

  // Counters for the metrics endpoint.
  int64_t applied() const { return applied_.load(); }
  int64_t repeats_answered() const { return repeats_.load(); }
  int64_t rejected() const { return rejected_.load(); }

 private:
  // WhenDurable, waited for. Never from a WhenDurable callback (the committer runs those).
  absl::Status AwaitDurable();

  struct Ran {
    v1::CallResult result;
    bool wrote = false;   // an effect or an inbox entry was written (not yet synced)
    bool repeat = false;  // the stored result of an earlier run
  };
  // Run's work under its locks: look up, apply, write unsynced.
  absl::StatusOr<Ran> RunLocked(const CallIdentity& identity,
                                std::initializer_list<absl::string_view> entities,
                                const ApplyFn& apply);

  RocksStore& store_;
  Clock& clock_;
  const bool legacy_mode_;
  FaultInjector* const faults_;
  SlotFences fences_;
  // Locks [first, last] as Run locks one slot (SlotFences::LockKey).
  StripedLocks::Guard LockSlots(uint32_t first, uint32_t last);
  // Takes the next effect sequence number, and gives it back once its batch committed
  // (or will never commit); ListEffects reads up to the watermark these leave.
  uint64_t TakeSeq();
  void ReleaseSeq(uint64_t seq);
  uint64_t CommittedWatermark();

  // Adds the follow-ups of `applied` to `batch` (RunLocked), filed under `slot` if any.
  absl::Status WriteFollowUps(const CallIdentity& identity, uint64_t seq, const Applied& applied,
                              rocksdb::WriteBatch* batch, std::optional<uint32_t> slot);
  // An imported effect or follow-up, under a key of this store's (their keys are the
  // source's sequence numbers); nothing if the same row was imported before. `seqs`
  // collects the sequence numbers taken, to give back once the batch is written.
  absl::Status ImportLogRow(const internal::SlotRow& row, rocksdb::WriteBatch* batch,
                            std::vector<uint64_t>* seqs, int64_t* follow_ups);
  // Files `cf`/`key` under `slot`; an index entry with `drop_at_ms` expires with its row.
  void IndexRow(rocksdb::WriteBatch* batch, uint32_t slot, const std::string& cf,
                const std::string& key, int64_t drop_at_ms);
  int64_t CountFollowUps();

  // Writes a batch of ImportSlotData or DropSlotData, synced, then tells the business
  // (SetSlotRowsReplaced), whatever the write's result.
  absl::Status WriteSlotRows(rocksdb::WriteBatch* batch, const char* what);

  const int64_t entry_retention_ms_;
  std::function<void()> slot_rows_replaced_;
  std::atomic<int64_t> follow_ups_pending_{0};
  absl::Mutex ack_mu_;  // one AckFollowUps at a time, so each deletion is counted once
  StripedLocks locks_;
  absl::Mutex seq_mu_;
  uint64_t next_effect_seq_ ABSL_GUARDED_BY(seq_mu_) = 1;
  std::set<uint64_t> uncommitted_seqs_ ABSL_GUARDED_BY(seq_mu_);
  std::atomic<int64_t> applied_{0};
  std::atomic<int64_t> repeats_{0};
  std::atomic<int64_t> rejected_{0};
};

// Whether Run refused a call because its key belongs to another command or payload.
bool IsKeyConflict(const absl::Status& status);

// Builds a CallResult for a terminal business rejection with an eonce.v1.Rejection.
v1::CallResult RejectionResult(absl::StatusCode code, const std::string& reason,
                               const std::string& detail);

}  // namespace eonce

#endif  // EONCE_SERVICES_INBOX_INBOX_H_
