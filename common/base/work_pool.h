// WorkPool: a fixed set of threads for work that blocks (synced RocksDB writes), so that
// gRPC's callback threads never wait on a disk.
//
// With many calls in flight, many writers reach RocksDB at once and share its group
// commit: one fsync covers them all. The queue is bounded: Post returns false when it is
// full, and the caller answers RESOURCE_EXHAUSTED instead of queueing without limit.
// Thread-safe. The destructor runs what is queued, then joins the threads.
#ifndef EONCE_COMMON_BASE_WORK_POOL_H_
#define EONCE_COMMON_BASE_WORK_POOL_H_

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/base/status.h"

namespace eonce {

// The retry hint of PoolFull.
inline constexpr int64_t kPoolFullRetryAfterMs = 100;

class WorkPool {
 public:
  WorkPool(int threads, size_t max_queue) : max_queue_(max_queue) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Loop(); });
  }
  ~WorkPool() {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    for (auto& t : threads_) t.join();
  }

  // False when the queue is full; the work is then not run.
  bool Post(std::function<void()> work) {
    absl::MutexLock lock(&mu_);
    if (queue_.size() >= max_queue_ || stopping_) return false;
    queue_.push_back(std::move(work));
    return true;
  }

 private:
  void Loop() {
    while (true) {
      std::function<void()> work;
      {
        absl::MutexLock lock(&mu_);
        auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !queue_.empty() || stopping_; };
        mu_.Await(absl::Condition(&ready));
        if (queue_.empty()) return;
        work = std::move(queue_.front());
        queue_.pop_front();
      }
      work();
    }
  }

  const size_t max_queue_;
  absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

// The answer to a call whose work a full pool turned away: RESOURCE_EXHAUSTED, reason
// OVERLOADED, with a retry hint; nothing was done. `what` names the work ("Submits").
inline absl::Status PoolFull(absl::string_view what) {
  return WithRetryAfter(Error(absl::StatusCode::kResourceExhausted, "OVERLOADED",
                              absl::StrCat("too many ", what, " in flight; nothing was done")),
                        kPoolFullRetryAfterMs);
}

}  // namespace eonce

#endif  // EONCE_COMMON_BASE_WORK_POOL_H_
