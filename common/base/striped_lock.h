// StripedLocks: a fixed array of mutexes picked by key hash.
//
// Lets a read-modify-write on one key (an idempotency record, an account) exclude other
// writers of the same key without a global lock, so that writes of different keys reach
// RocksDB together and share its group commit. Lock() takes several keys at once in
// stripe order, so two callers never deadlock. Thread-safe; the guard must not outlive
// the StripedLocks.
#ifndef EONCE_COMMON_BASE_STRIPED_LOCK_H_
#define EONCE_COMMON_BASE_STRIPED_LOCK_H_

#include <algorithm>
#include <initializer_list>
#include <memory>
#include <vector>

#include "absl/hash/hash.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace eonce {

class StripedLocks {
 public:
  class Guard {
   public:
    Guard(Guard&& other) noexcept : held_(std::move(other.held_)) { other.held_.clear(); }
    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;
    ~Guard() {
      for (auto it = held_.rbegin(); it != held_.rend(); ++it) (*it)->Unlock();
    }

   private:
    friend class StripedLocks;
    explicit Guard(std::vector<absl::Mutex*> held) : held_(std::move(held)) {}
    std::vector<absl::Mutex*> held_;
  };

  explicit StripedLocks(size_t stripes = 1024) : mutexes_(new absl::Mutex[stripes]), n_(stripes) {}

  Guard Lock(std::initializer_list<absl::string_view> keys) {
    return Lock(std::vector<absl::string_view>(keys));
  }

  Guard Lock(const std::vector<absl::string_view>& keys) {
    std::vector<size_t> indexes;
    for (absl::string_view key : keys) indexes.push_back(absl::HashOf(key) % n_);
    std::sort(indexes.begin(), indexes.end());
    indexes.erase(std::unique(indexes.begin(), indexes.end()), indexes.end());
    std::vector<absl::Mutex*> held;
    for (size_t i : indexes) {
      mutexes_[i].Lock();
      held.push_back(&mutexes_[i]);
    }
    return Guard(std::move(held));
  }

 private:
  std::unique_ptr<absl::Mutex[]> mutexes_;
  size_t n_;
};

}  // namespace eonce

#endif  // EONCE_COMMON_BASE_STRIPED_LOCK_H_
