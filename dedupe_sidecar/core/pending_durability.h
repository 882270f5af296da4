// PendingDurability: the keys whose newest outcome is written but not yet known to be on
// disk. The Deduper writes an outcome under the key's lock without a sync and awaits the
// group fsync after releasing it; a duplicate that reads the record meanwhile must await
// that fsync too before it answers, and only then. A duplicate of a key not listed here
// answers at once: its record is durable (a write leaves the list only after its fsync,
// and the store syncs what it recovered when it opens), or its outcome is held durably by
// the business's inbox (an outcome the business kept is never listed).
#ifndef EONCE_DEDUPE_SIDECAR_CORE_PENDING_DURABILITY_H_
#define EONCE_DEDUPE_SIDECAR_CORE_PENDING_DURABILITY_H_

#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

namespace eonce {

class PendingDurability {
 public:
  // Before the unsynced write, under the key's lock.
  void Add(const std::string& key) {
    absl::MutexLock lock(&mu_);
    count_[key]++;
  }
  // Once the write is durable. A write whose fsync failed is never removed: its readers
  // go on awaiting, and so meet the failed store's error instead of answering.
  void Remove(const std::string& key) {
    absl::MutexLock lock(&mu_);
    auto it = count_.find(key);
    if (it != count_.end() && --it->second == 0) count_.erase(it);
  }
  bool Contains(const std::string& key) const {
    absl::MutexLock lock(&mu_);
    return count_.contains(key);
  }

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, int> count_ ABSL_GUARDED_BY(mu_);
};

}  // namespace eonce

#endif  // EONCE_DEDUPE_SIDECAR_CORE_PENDING_DURABILITY_H_
