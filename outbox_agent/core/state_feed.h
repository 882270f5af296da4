// StateFeed: "something changed" notices for Watch subscribers.
//
// A notice names a command and its new state; the store says what is true. Each
// subscriber has a bounded queue; one that falls behind is cut off (it is told so and
// may re-subscribe and re-read), so a slow watcher never slows the replayer. Thread-safe.
#ifndef EONCE_OUTBOX_AGENT_CORE_STATE_FEED_H_
#define EONCE_OUTBOX_AGENT_CORE_STATE_FEED_H_

#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "eonce/v1/agent.pb.h"

namespace eonce {

class StateFeed {
 public:
  class Subscription {
   public:
    // Blocks up to `timeout_ms` for the next notice; false on timeout or cut-off.
    bool Next(v1::WatchEvent* event, int64_t timeout_ms);
    bool cut_off() const;

   private:
    friend class StateFeed;
    mutable absl::Mutex mu_;
    std::deque<v1::WatchEvent> queue_ ABSL_GUARDED_BY(mu_);
    bool cut_off_ ABSL_GUARDED_BY(mu_) = false;
    std::function<void()> wake_ ABSL_GUARDED_BY(mu_);
  };

  explicit StateFeed(size_t max_queue = 4096, size_t max_subscribers = 64)
      : max_queue_(max_queue), max_subscribers_(max_subscribers) {}

  // Null when there are already max_subscribers.
  std::shared_ptr<Subscription> Subscribe(std::function<void()> wake = nullptr);
  void Unsubscribe(const std::shared_ptr<Subscription>& subscription);
  void Publish(const v1::WatchEvent& event);
  // The notice for `record`'s current state, with its trace id and current attempt's span.
  static v1::WatchEvent EventOf(const v1::OutboxRecord& record);

 private:
  const size_t max_queue_;
  const size_t max_subscribers_;
  absl::Mutex mu_;
  std::vector<std::shared_ptr<Subscription>> subscribers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace eonce

#endif  // EONCE_OUTBOX_AGENT_CORE_STATE_FEED_H_
