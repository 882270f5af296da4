#include "dedupe_sidecar/authz/audit_log.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/big_endian.h"
#include "common/base/hash.h"
#include "common/base/log.h"
#include "common/base/status.h"
#include "common/base/thread_class.h"
#include "common/store/ttl.h"

namespace eonce {
namespace {

constexpr char kAuditCf[] = "audit";
constexpr char kAuditIndexCf[] = "audit_idx";
constexpr size_t kMaxWriteBatch = 256;

std::string SeqKey(uint64_t seq) { return BigEndian64(seq); }

// The sequence number that ends an event key or an index key.
uint64_t SeqOf(absl::string_view key) {
  return ReadBigEndian64(key.substr(key.size() < 8 ? 0 : key.size() - 8));
}

std::string IndexPrefix(char kind, const std::string& tenant, const std::string& id) {
  return absl::StrCat(std::string(1, kind), tenant, std::string(1, '\0'), id,
                      std::string(1, '\0'));
}

}  // namespace

std::string AuditEventHash(const v1::AuditEvent& event) {
  // An event being appended has no hash yet: its bytes are the ones to hash.
  if (event.hash().empty()) return Sha256(event.SerializeAsString());
  v1::AuditEvent copy = event;
  copy.clear_hash();
  return Sha256(copy.SerializeAsString());
}

std::vector<ColumnFamilySpec> AuditLog::ColumnFamilies(RecordStoreFilters& filters) {
  ColumnFamilySpec audit{kAuditCf, {}};
  audit.options.compaction_filter_factory = filters.drop_only_filter;
  ColumnFamilySpec index{kAuditIndexCf, {}};
  index.options.compaction_filter_factory = filters.drop_only_filter;
  // Both are scanned (Verify, Query).
  audit.lookups_miss = false;
  index.lookups_miss = false;
  // The index is read only by Query, an operator's scan, and its keys (a command id or
  // an idempotency key, then the event's number) arrive in no order: appended, not
  // searched for, they cost a first seen two skiplist searches fewer. The events are
  // looked up by number (Query), so they keep their skiplist.
  index.unsorted_memtable = true;
  return {audit, index};
}

AuditLog::AuditLog(RocksStore& store, Clock& clock, int64_t retention_ms, size_t max_queue,
                   absl::Duration linger, std::function<void()> before_write)
    : store_(store),
      clock_(clock),
      retention_ms_(retention_ms),
      max_queue_(max_queue),
      linger_(linger),
      before_write_(std::move(before_write)) {
  std::unique_ptr<rocksdb::Iterator> it = store_.NewIterator(kAuditCf);
  it->SeekToLast();
  v1::AuditEvent last;
  if (it->Valid() &&
      ParseFramed(absl::string_view(it->value().data(), it->value().size()), &last)) {
    absl::MutexLock lock(&mu_);
    next_seq_ = last.seq() + 1;
    last_hash_ = last.hash();
    written_seq_ = last.seq();
  }
  writer_ = std::thread([this] { WriterLoop(); });
}

AuditLog::~AuditLog() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    work_cv_.SignalAll();
    written_cv_.SignalAll();
  }
  writer_.join();
}

AuditLog::Reservation& AuditLog::Reservation::operator=(Reservation&& other) noexcept {
  if (this != &other) {
    Release();
    reserved_ = std::move(other.reserved_);
    events_ = std::exchange(other.events_, 0);
  }
  return *this;
}

void AuditLog::Reservation::Release() {
  if (reserved_ != nullptr) reserved_->fetch_sub(events_);
  reserved_.reset();
  events_ = 0;
}

absl::StatusOr<AuditLog::Reservation> AuditLog::Reserve(size_t events) {
  absl::MutexLock lock(&mu_);
  const size_t taken = queue_.size() + reserved_->load();
  if (taken + events > max_queue_) {
    // The writer is behind (a slow or stalled disk): wake it, and turn the command away
    // before anything is decided for it.
    work_cv_.Signal();
    return WithRetryAfter(
        Error(absl::StatusCode::kResourceExhausted, "AUDIT_BACKLOG",
              absl::StrCat("the audit log is ", taken, " events behind (its limit is ",
                           max_queue_, "); nothing was done, retry later")),
        kBacklogRetryMs);
  }
  reserved_->fetch_add(events);
  Reservation reservation;
  reservation.reserved_ = reserved_;
  reservation.events_ = events;
  return reservation;
}

void AuditLog::Append(v1::AuditEvent event, Reservation* reservation) {
  {
    absl::MutexLock lock(&mu_);
    bool room = true;
    if (reservation != nullptr && reservation->reserved_ == reserved_ &&
        reservation->events_ > 0) {
      --reservation->events_;
      reserved_->fetch_sub(1);
    } else if (queue_.size() + reserved_->load() >= max_queue_) {
      room = false;  // and waiting for it is not allowed here (see the header)
      ++lost_;
      work_cv_.Signal();
    }
    if (room) {
      event.set_seq(next_seq_++);
      event.set_at_ms(clock_.NowMs());
      event.set_prev_hash(last_hash_);
      event.set_hash(AuditEventHash(event));
      last_hash_ = event.hash();
      queue_.push_back(std::move(event));
      // A lingering writer is not woken: it comes for this event when its linger ends.
      if (writer_idle_ || queue_.size() >= BatchLimit()) work_cv_.Signal();
      return;
    }
  }
  // Not in the audit log: the error log keeps who did what, outside the lock.
  LogError("audit queue full: event not in the audit log",
           {{"decision", event.decision()},
            {"tenant", event.tenant()},
            {"actor", event.actor()},
            {"workload", event.workload()},
            {"command_id", event.command_id()},
            {"idempotency_key", event.idempotency_key()},
            {"operation", event.operation()},
            {"result", event.result()},
            {"at_ms", std::to_string(clock_.NowMs())}});
}

absl::Status AuditLog::Flush() {
  absl::MutexLock lock(&mu_);
  const uint64_t target = next_seq_ - 1;
  ++flushers_;
  while (written_seq_ < target && write_error_.ok()) {
    work_cv_.Signal();  // cut a linger short
    written_cv_.Wait(&mu_);
  }
  --flushers_;
  return write_error_;
}

uint64_t AuditLog::appended() const {
  absl::MutexLock lock(&mu_);
  return next_seq_ - 1;
}

uint64_t AuditLog::lost() const {
  absl::MutexLock lock(&mu_);
  return lost_;
}

size_t AuditLog::BatchLimit() const { return std::min(kMaxWriteBatch, max_queue_); }

bool AuditLog::writer_runs_as_batch() const {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](const WriterClass* c) { return *c != WriterClass::kStarting; }, &writer_class_));
  return writer_class_ == WriterClass::kBatch;
}

uint64_t AuditLog::writes() const {
  absl::MutexLock lock(&mu_);
  return writes_;
}

void AuditLog::WriterLoop() {
  // The writer wakes from its linger on a timer, on whichever core it slept; as batch
  // work it then waits for a free core instead of preempting a request's thread there.
  const bool as_batch = AsBatchThread().ok() && IsBatchThread();
  {
    absl::MutexLock lock(&mu_);
    writer_class_ = as_batch ? WriterClass::kBatch : WriterClass::kNormal;
  }
  while (true) {
    std::vector<v1::AuditEvent> batch;
    {
      absl::MutexLock lock(&mu_);
      while (queue_.empty() && !stopping_) {
        writer_idle_ = true;
        work_cv_.Wait(&mu_);
        writer_idle_ = false;
      }
      if (queue_.empty() && stopping_) return;
      // Let the events of the next moments share this write, until a flush, a full batch
      // or the end cuts the linger short.
      const absl::Time until = absl::Now() + linger_;
      while (!stopping_ && flushers_ == 0 && queue_.size() < BatchLimit() &&
             !work_cv_.WaitWithDeadline(&mu_, until)) {
      }
      while (!queue_.empty() && batch.size() < BatchLimit()) {
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
    }
    if (before_write_) before_write_();
    absl::Status status = WriteEvents(batch);
    absl::MutexLock lock(&mu_);
    if (!status.ok()) {
      // The chain in memory has moved on; a gap would follow. Keep the error so that
      // Flush (and the health check) report it rather than hide it.
      write_error_ = status;
    } else {
      written_seq_ = batch.back().seq();
      ++writes_;
    }
    written_cv_.SignalAll();
  }
}

absl::Status AuditLog::WriteEvents(const std::vector<v1::AuditEvent>& events) {
  rocksdb::WriteBatch batch;
  for (const v1::AuditEvent& event : events) {
    int64_t drop_at = event.at_ms() + retention_ms_;
    batch.Put(store_.cf(kAuditCf), SeqKey(event.seq()),
              EncodeFramed(drop_at, 0, event.SerializeAsString()));
    std::string framed_empty = EncodeFramed(drop_at, 0, "");
    if (!event.command_id().empty()) {
      batch.Put(store_.cf(kAuditIndexCf),
                IndexPrefix('c', event.tenant(), event.command_id()) + SeqKey(event.seq()),
                framed_empty);
    }
    if (!event.idempotency_key().empty()) {
      batch.Put(store_.cf(kAuditIndexCf),
                IndexPrefix('k', event.tenant(), event.idempotency_key()) + SeqKey(event.seq()),
                framed_empty);
    }
  }
  // Not synced: see the header. The next synced record write carries these to disk.
  return store_.Write(&batch, /*sync=*/false, "write audit");
}

absl::StatusOr<std::vector<v1::AuditEvent>> AuditLog::Query(
    const std::string& tenant, const v1::QueryAuditRequest& request) {
  int limit = std::clamp(request.limit() <= 0 ? 100 : request.limit(), 1, 1000);
  std::string prefix;
  if (!request.command_id().empty()) {
    prefix = IndexPrefix('c', tenant, request.command_id());
  } else if (!request.idempotency_key().empty()) {
    prefix = IndexPrefix('k', tenant, request.idempotency_key());
  } else {
    return Error(absl::StatusCode::kInvalidArgument, "INVALID_FIELD",
                 "lookup: a command_id or idempotency_key is required");
  }
  // Read your writes: every event appended before the query is in its answer.
  EONCE_RETURN_IF_ERROR(Flush());
  std::vector<v1::AuditEvent> events;
  std::unique_ptr<rocksdb::Iterator> it = store_.NewIterator(kAuditIndexCf);
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix) &&
                         static_cast<int>(events.size()) < limit;
       it->Next()) {
    std::string value;
    uint64_t seq = SeqOf(absl::string_view(it->key().data(), it->key().size()));
    rocksdb::Status status = store_.Get(kAuditCf, SeqKey(seq), &value);
    if (status.IsNotFound()) continue;  // expired between the index and the event
    EONCE_RETURN_IF_ERROR(FromRocks(status, "read audit event"));
    v1::AuditEvent event;
    if (!ParseFramed(value, &event)) {
      return Error(absl::StatusCode::kDataLoss, "STORE_CORRUPT", "undecodable audit event");
    }
    if (event.tenant() == tenant) events.push_back(std::move(event));
  }
  EONCE_RETURN_IF_ERROR(FromRocks(it->status(), "query audit"));
  return events;
}

absl::StatusOr<v1::VerifyAuditResponse> AuditLog::Verify(uint64_t after_seq,
                                                         uint32_t max_events) {
  EONCE_RETURN_IF_ERROR(Flush());
  if (max_events == 0 || max_events > kMaxVerifyEvents) max_events = kMaxVerifyEvents;
  v1::VerifyAuditResponse response;
  response.set_ok(true);
  std::unique_ptr<rocksdb::Iterator> it = store_.NewIterator(kAuditCf);
  bool first = true;
  uint64_t expected_seq = 0;
  std::string expected_prev;
  const int64_t now = clock_.NowMs();
  // Going on after an earlier call: its last event (if still within retention) anchors
  // the link to this page.
  if (after_seq > 0) {
    it->Seek(SeqKey(after_seq));
    v1::AuditEvent anchor;
    Framed framed;
    if (it->Valid() && SeqOf(absl::string_view(it->key().data(), it->key().size())) == after_seq &&
        ParseFramed(absl::string_view(it->value().data(), it->value().size()), &anchor, &framed) &&
        !framed.DroppedAt(now)) {
      first = false;
      expected_seq = after_seq + 1;
      expected_prev = anchor.hash();
    }
  }
  // Bounded by entries read, expired ones included, so one call costs at most that.
  uint32_t scanned = 0;
  uint64_t last_seq = after_seq;
  for (after_seq > 0 ? it->Seek(SeqKey(after_seq + 1)) : it->SeekToFirst(); it->Valid();
       it->Next()) {
    if (scanned++ >= max_events) {
      response.set_next_after_seq(last_seq);
      break;
    }
    last_seq = SeqOf(absl::string_view(it->key().data(), it->key().size()));
    v1::AuditEvent event;
    Framed framed;
    uint64_t key_seq = SeqOf(absl::string_view(it->key().data(), it->key().size()));
    auto fail = [&](uint64_t seq, std::string problem) {
      response.set_ok(false);
      response.set_first_bad_seq(seq);
      response.set_problem(std::move(problem));
    };
    if (!ParseFramed(absl::string_view(it->value().data(), it->value().size()), &event,
                    &framed)) {
      fail(key_seq, "event does not decode");
      break;
    }
    // Past its retention: compaction drops such events in no particular order, so gaps
    // among them are not tampering. The first event still within retention anchors the
    // chain; every event after it was written later and must all still be there.
    if (framed.DroppedAt(now)) {
      first = true;
      continue;
    }
    if (event.seq() != key_seq) {
      fail(key_seq, "event stored under another sequence number");
      break;
    }
    if (AuditEventHash(event) != event.hash()) {
      fail(event.seq(), "event hash does not match its contents (changed)");
      break;
    }
    // The oldest stored event anchors the chain: the ones before it expired.
    if (!first) {
      if (event.seq() != expected_seq) {
        fail(expected_seq, absl::StrCat("event ", expected_seq, " is missing (deleted)"));
        break;
      }
      if (event.prev_hash() != expected_prev) {
        fail(event.seq(), "previous-hash link broken");
        break;
      }
    }
    first = false;
    expected_seq = event.seq() + 1;
    expected_prev = event.hash();
    response.set_events_checked(response.events_checked() + 1);
  }
  EONCE_RETURN_IF_ERROR(FromRocks(it->status(), "verify audit"));
  if (!response.ok()) chain_broken_.store(true);
  return response;
}

absl::Status AuditLog::VerifyStep(uint32_t max_events) {
  uint64_t from = 0;
  {
    absl::MutexLock lock(&mu_);
    from = verified_seq_;
  }
  absl::StatusOr<v1::VerifyAuditResponse> step = Verify(from, max_events);
  if (!step.ok()) return step.status();
  absl::MutexLock lock(&mu_);
  // Go on from the page's end; at the end of the log, start the next pass from the
  // beginning, so an event changed after it was checked is found on the next pass.
  if (step->ok()) verified_seq_ = step->next_after_seq();
  return absl::OkStatus();
}

bool AuditLog::chain_broken() const { return chain_broken_.load(); }

}  // namespace eonce
