// FinishedAnswers: the records of the commands finished most recently, in memory, so that
// a retry of one is answered without a read of the store.
//
// Retries come soon after the attempt they repeat, and often more than once: a client's
// timeout, an agent's backoff, a duplicate submission, many copies at once. The
// RecordStore puts a finished record (committed or failed) here when it writes one, and
// fills in one that reads of the store found finished twice in a short while, so that a
// retried key is served from memory from its third lookup on. (A key read once is only
// noted, in a fixed array of fingerprints per shard: lookups spread over a large store
// would otherwise copy every record they read into memory and push the others out.) A
// finished record does not change; it only leaves (the store trims it to a tombstone,
// then drops it, or a slot moves away, or the key is freed or taken by a new attempt).
// Each entry carries the trim and drop times stamped on the stored copy, and the
// RecordStore reads them with the same rules as a stored one.
//
// Writes and fills race: a read may find the old record just before a write replaces it.
// Each write of a key through the store is bracketed by BeginWrite and EndWrite, and a
// fill carries the ticket its lookup's miss handed out: a fill is refused if any write of
// its shard began or ended after that ticket, or is still under way. So an entry is
// always the store's current record of its key, and an answer from here is the answer
// the store would give.
//
// Bounded by bytes (the record, its key and a fixed overhead per entry): past the bound
// the least recently used entries leave. 0 bytes turns it off. Thread-safe; 16 shards,
// each under its own lock.
#ifndef EONCE_DEDUPE_SIDECAR_STORE_FINISHED_ANSWERS_H_
#define EONCE_DEDUPE_SIDECAR_STORE_FINISHED_ANSWERS_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <list>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "eonce/internal/records.pb.h"

namespace eonce {

class FinishedAnswers {
 public:
  static constexpr size_t kDefaultMaxBytes = size_t{16} << 20;
  // What an entry costs beyond its key and serialized record: the list node, the map's
  // slot, and the allocations of the key and the record's bytes. Measured on the heap for
  // a typical record (finished_answers_test: about 360 bytes an entry, all told).
  static constexpr size_t kEntryOverheadBytes = 180;

  // A finished record as a lookup gives it back, parsed.
  struct Entry {
    internal::IdempotencyRecord record;
    int64_t drop_at_ms = 0;  // as framed in the store (common/store/ttl.h); 0: never
    int64_t trim_at_ms = 0;
  };
  // A finished record as it is put in and kept: the bytes its stored copy holds (a third of
  // a parsed record's heap), with that copy's times.
  struct Stored {
    std::string record;
    int64_t drop_at_ms = 0;
    int64_t trim_at_ms = 0;
  };

  explicit FinishedAnswers(size_t max_bytes = kDefaultMaxBytes);

  // What a lookup that missed hands to the Fill of the record the store gave it.
  struct Ticket {
    uint64_t generation = 0;
    bool admitted = false;  // the key missed once before, lately
  };
  // Copies the entry of `scoped_key` into `out` and marks it used; false if there is none,
  // and then `*ticket`, if given, is what a Fill of the key read from the store needs. The
  // record is kept serialized, and parsed into `out` outside the shard's lock.
  bool Get(const std::string& scoped_key, Entry* out, Ticket* ticket = nullptr);
  // Stores `stored`, the record the store held for `scoped_key` when a read found it, if
  // `ticket` admits it, unless a write of the shard began or ended since Get handed out
  // `ticket` or is still under way, or the key is here already. Evicts as EndWrite does.
  void Fill(const std::string& scoped_key, Stored stored, const Ticket& ticket);
  // Bracket every write or delete of `scoped_key` in the store. BeginWrite takes the
  // key's entry out; EndWrite puts `finished` in (the record written, if it is finished
  // and the write succeeded) or leaves the key out. Putting one in evicts the least
  // recently used entries of its shard until the shard is within its bound; an entry
  // larger than a shard's bound is not kept.
  void BeginWrite(const std::string& scoped_key);
  void EndWrite(const std::string& scoped_key, Stored* finished);

  size_t bytes() const;
  size_t entries() const;
  // Which of the kShards shards holds `scoped_key`; each evicts on its own.
  static constexpr int kShards = 16;
  // Fingerprints of the keys that missed, per shard: a key that misses again while its
  // fingerprint is still there is admitted. 8,192 in all, fewer than the entries of the
  // default bound (about 46,000), so that a key admitted was retried soon enough to be
  // found here again before it is evicted; keys retried further apart than that are read
  // from the store, and are not copied in only to be pushed out unread. A key's
  // fingerprint goes in one set of kNoteWays places (an empty one, else one picked by the
  // count of notes mixed with the key's bits), so that keys retried in turn do not push
  // each other's fingerprint out every time, as two keys with one place would.
  static constexpr size_t kMissesNoted = 512;
  static constexpr size_t kNoteWays = 4;
  static_assert(kMissesNoted % kNoteWays == 0);
  static int ShardIndexOf(const std::string& scoped_key);
  int64_t hits() const { return hits_.load(std::memory_order_relaxed); }
  int64_t misses() const { return misses_.load(std::memory_order_relaxed); }

 private:
  struct Node {
    std::string scoped_key;
    Stored stored;
    size_t cost;
  };
  using Lru = std::list<Node>;
  struct Shard {
    mutable absl::Mutex mu;
    Lru lru ABSL_GUARDED_BY(mu);  // the most recently used first
    // Keyed by a view of its node's key: list nodes do not move.
    absl::flat_hash_map<absl::string_view, Lru::iterator> index ABSL_GUARDED_BY(mu);
    size_t bytes ABSL_GUARDED_BY(mu) = 0;
    // Moves on at every BeginWrite and EndWrite: a fill's ticket.
    uint64_t generation ABSL_GUARDED_BY(mu) = 0;
    int writing ABSL_GUARDED_BY(mu) = 0;  // writes begun and not yet ended
    std::vector<uint64_t> missed ABSL_GUARDED_BY(mu);  // kMissesNoted, or none when off
    uint64_t notes ABSL_GUARDED_BY(mu) = 0;  // fingerprints noted: picks a place to take
  };

  static size_t HashOf(const std::string& scoped_key);
  Shard& ShardOf(size_t hash) { return shards_[hash % kShards]; }
  static void EraseLocked(Shard& shard, Lru::iterator it) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);
  static void EraseKeyLocked(Shard& shard, const std::string& scoped_key)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);
  void InsertLocked(Shard& shard, const std::string& scoped_key, Stored stored)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);
  // Notes a miss of the key of `hash`: true if it missed lately too (its fingerprint was
  // there, and is taken out), else its fingerprint goes in.
  static bool NoteMissLocked(Shard& shard, size_t hash) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);

  const size_t max_bytes_per_shard_;
  Shard shards_[kShards];
  std::atomic<int64_t> hits_{0};
  std::atomic<int64_t> misses_{0};
};

}  // namespace eonce

#endif  // EONCE_DEDUPE_SIDECAR_STORE_FINISHED_ANSWERS_H_
