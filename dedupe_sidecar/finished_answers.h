// FinishedAnswers: the records of the commands finished most recently, in memory, so that
// a retry of one is answered without a read of the store.
//
// Retries come soon after the attempt they repeat: a client's timeout, an agent's
// backoff, a duplicate submission. The RecordStore fills this cache when it writes a
// finished record (committed or failed), never on a read, so a lookup of an old key costs
// one failed probe and leaves the cache as it was. A finished record does not change; it
// only leaves (the store trims it to a tombstone, then drops it, or a slot moves away, or
// the key is freed). Each entry carries the trim and drop times stamped on the stored
// copy, and the RecordStore reads them with the same rules as a stored one; every write
// or delete of a key through the store takes its entry out first. So an answer from here
// is the answer the store would have given.
//
// Bounded by bytes (the record, its key and a fixed overhead per entry): past the bound
// the least recently used entries leave. 0 bytes turns it off. Thread-safe; 16 shards,
// each under its own lock.
#ifndef EONCE_DEDUPE_SIDECAR_FINISHED_ANSWERS_H_
#define EONCE_DEDUPE_SIDECAR_FINISHED_ANSWERS_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <list>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "eonce/internal/records.pb.h"

namespace eonce {

class FinishedAnswers {
 public:
  static constexpr size_t kDefaultMaxBytes = size_t{16} << 20;
  // What an entry costs beyond its key and record: list and map nodes, the Record's own
  // fields and allocations.
  static constexpr size_t kEntryOverheadBytes = 256;

  struct Entry {
    internal::IdempotencyRecord record;
    int64_t drop_at_ms = 0;  // as framed in the store (common/ttl.h); 0: never
    int64_t trim_at_ms = 0;
  };

  explicit FinishedAnswers(size_t max_bytes = kDefaultMaxBytes);

  // Copies the entry of `scoped_key` into `out` and marks it used; false if there is none.
  bool Get(const std::string& scoped_key, Entry* out);
  // Stores `entry` under `scoped_key`, replacing what was there; then evicts the least
  // recently used entries of its shard until the shard is within its bound. An entry
  // larger than a shard's bound is not kept.
  void Put(const std::string& scoped_key, Entry entry);
  void Erase(const std::string& scoped_key);

  size_t bytes() const;
  size_t entries() const;
  // Which of the kShards shards holds `scoped_key`; each evicts on its own.
  static constexpr int kShards = 16;
  static int ShardIndexOf(const std::string& scoped_key);
  int64_t hits() const { return hits_.load(std::memory_order_relaxed); }
  int64_t misses() const { return misses_.load(std::memory_order_relaxed); }

 private:
  struct Node {
    std::string scoped_key;
    Entry entry;
    size_t cost;
  };
  using Lru = std::list<Node>;
  struct Shard {
    mutable absl::Mutex mu;
    Lru lru ABSL_GUARDED_BY(mu);  // the most recently used first
    absl::flat_hash_map<std::string, Lru::iterator> index ABSL_GUARDED_BY(mu);
    size_t bytes ABSL_GUARDED_BY(mu) = 0;
  };

  static void EraseLocked(Shard& shard, Lru::iterator it) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);

  const size_t max_bytes_per_shard_;
  Shard shards_[kShards];
  std::atomic<int64_t> hits_{0};
  std::atomic<int64_t> misses_{0};
};

}  // namespace eonce

#endif  // EONCE_DEDUPE_SIDECAR_FINISHED_ANSWERS_H_
