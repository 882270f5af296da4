// AuditLog: one event per sidecar decision, chained by hash.
//
// Each event carries the hash of the one before it, and its own hash over its contents,
// so a changed or deleted event breaks the chain and Verify finds it. Events live in
// their own column family with their own (longer) retention, and are indexed by
// (tenant, command id) and (tenant, key) for queries that never cross tenants.
//
// Append assigns the sequence number and the hashes under a small lock and hands the
// event to one writer thread, which writes events strictly in sequence order. So the
// stored log is always a prefix of the chain. The writes are not synced on their own: the
// next synced write of any record makes them durable, so a crash can lose the last few
// events but never break the chain.
//
// Append never waits: it is called while the Deduper holds key locks, and on the store's
// committer thread, neither of which may wait on a slow disk. The queue is bounded
// (`max_queue` events), and room in it is taken before the decision that needs it:
// Reserve, at the start of a Submit, before any lock, takes room for the events the
// command may append and is refused (RESOURCE_EXHAUSTED, AUDIT_BACKLOG, with a retry
// delay) while the queue and the room already taken fill it, so a command is turned away
// before anything is decided rather than decided without a record of who did it. An
// Append with room reserved always finds it. An Append without (an operator's
// resolution, or more events than reserved) takes free room if there is any; when there
// is none the event is not queued: it is counted (lost(), the metric
// eonce_sidecar_audit_lost_total) and written to the error log with its fields instead,
// and the chain goes on without it (it never held it, so Verify still passes).
//
// Append wakes the writer only when it sleeps on an empty queue; the writer then lingers
// up to `linger` for more events before it writes, so that under load one wake-up and one
// RocksDB write carry many events instead of one each. A full batch, a Flush or the
// destructor cut the linger short.
//
// Thread-safe. Destroy before the RocksStore; the destructor writes what is queued.
#ifndef EONCE_DEDUPE_SIDECAR_AUTHZ_AUDIT_LOG_H_
#define EONCE_DEDUPE_SIDECAR_AUTHZ_AUDIT_LOG_H_

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "common/store/rocks.h"
#include "dedupe_sidecar/store/record_store.h"
#include "eonce/v1/sidecar.pb.h"

namespace eonce {

class AuditLog {
 public:
  static std::vector<ColumnFamilySpec> ColumnFamilies(RecordStoreFilters& filters);

  static constexpr absl::Duration kDefaultLinger = absl::Milliseconds(2);
  // The retry delay given with AUDIT_BACKLOG: a write carries up to 256 events, so a
  // writer that keeps up frees room within milliseconds.
  static constexpr int64_t kBacklogRetryMs = 100;
  // `before_write`, for tests: runs on the writer thread before each write (a test stalls
  // the writer with it); empty: none.
  AuditLog(RocksStore& store, Clock& clock, int64_t retention_ms, size_t max_queue = 4096,
           absl::Duration linger = kDefaultLinger, std::function<void()> before_write = nullptr);
  ~AuditLog();

  // Room in the queue for events yet to be appended, taken by Reserve and given back as
  // Append uses it, or by Release (at the latest when it is destroyed). Movable. It may
  // outlive the AuditLog (a Submit still in flight when the sidecar's log is gone): it
  // shares only the count of room reserved.
  class Reservation {
   public:
    Reservation() = default;
    Reservation(Reservation&& other) noexcept { *this = std::move(other); }
    Reservation& operator=(Reservation&& other) noexcept;
    ~Reservation() { Release(); }
    void Release();

   private:
    friend class AuditLog;
    std::shared_ptr<std::atomic<size_t>> reserved_;  // the log's count
    size_t events_ = 0;
  };
  // Room for `events` events, or RESOURCE_EXHAUSTED (AUDIT_BACKLOG) while the queue and the
  // room already reserved fill it. Never waits.
  absl::StatusOr<Reservation> Reserve(size_t events);

  // Sets seq, at_ms, prev_hash and hash, and queues the event for writing, in room from
  // `reservation` if it holds any. Never waits; see the header for an event that finds no
  // room.
  void Append(v1::AuditEvent event, Reservation* reservation = nullptr);
  // Returns once every event appended before the call is written.
  absl::Status Flush();

  // Events of one command id or key within `tenant`, oldest first; every event appended
  // before the call is included (it flushes first).
  absl::StatusOr<std::vector<v1::AuditEvent>> Query(const std::string& tenant,
                                                   const v1::QueryAuditRequest& request);
  // Walks the stored chain after `after_seq` (0: from the start) and reports the first
  // broken link, checking at most `max_events` (bounded to kMaxVerifyEvents) events; the
  // answer's next_after_seq says where to go on.
  static constexpr uint32_t kMaxVerifyEvents = 100'000;
  absl::StatusOr<v1::VerifyAuditResponse> Verify(uint64_t after_seq = 0,
                                                 uint32_t max_events = kMaxVerifyEvents);

  uint64_t appended() const;
  // Events that found no room and went to the error log instead of the audit log.
  uint64_t lost() const;
  // The RocksDB writes that carried them (each holds one or more events).
  uint64_t writes() const;
  // Whether the writer thread runs as batch work (common/base/thread_class.h): false only
  // where the platform refuses it. Waits for the writer to start.
  bool writer_runs_as_batch() const;

  // The background check: verifies the next `max_events` events after those the step
  // before verified; past the end the next step starts a new pass from the beginning, so
  // repeated steps keep walking the whole log. A broken link found by a step or by
  // Verify sets chain_broken() for good (the eonce_sidecar_audit_chain_broken gauge).
  absl::Status VerifyStep(uint32_t max_events);
  bool chain_broken() const;

 private:
  void WriterLoop();
  // The most events one write carries (a queue shorter than a batch fills at its bound).
  size_t BatchLimit() const;
  absl::Status WriteEvents(const std::vector<v1::AuditEvent>& events);

  enum class WriterClass { kStarting, kBatch, kNormal };

  RocksStore& store_;
  Clock& clock_;
  const int64_t retention_ms_;
  const size_t max_queue_;
  const absl::Duration linger_;
  const std::function<void()> before_write_;

  mutable absl::Mutex mu_;
  absl::CondVar work_cv_;     // the writer waits here for events, a flush or the end
  absl::CondVar written_cv_;  // Flush waits here
  bool writer_idle_ ABSL_GUARDED_BY(mu_) = false;  // asleep on an empty queue
  int flushers_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 1;
  std::string last_hash_ ABSL_GUARDED_BY(mu_);
  std::deque<v1::AuditEvent> queue_ ABSL_GUARDED_BY(mu_);
  // Room reserved and not used yet: queue_.size() + *reserved_ <= max_queue_. Raised and
  // used under mu_; a Reservation gives back what is left without it (it only lowers).
  const std::shared_ptr<std::atomic<size_t>> reserved_ =
      std::make_shared<std::atomic<size_t>>(0);
  uint64_t lost_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t written_seq_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t writes_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status write_error_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  WriterClass writer_class_ ABSL_GUARDED_BY(mu_) = WriterClass::kStarting;
  uint64_t verified_seq_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<bool> chain_broken_{false};
  std::thread writer_;
};

// The hash an event must carry: SHA-256 over the event with `hash` unset.
std::string AuditEventHash(const v1::AuditEvent& event);

}  // namespace eonce

#endif  // EONCE_DEDUPE_SIDECAR_AUTHZ_AUDIT_LOG_H_
