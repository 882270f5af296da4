// StateFeed: "something changed" notices for Watch subscribers.
//
// A notice names a command and its new state; the store says what is true. Each
// subscriber has a bounded queue; one that falls behind is cut off (it is told so and
// may re-subscribe and re-read), so a slow watcher never slows the replayer. A subscriber
// may ask for some states only: notices of the others are neither queued for it nor wake
// it, and Announce builds a record's notice only when someone hears of it.
// Thread-safe.
#ifndef EONCE_OUTBOX_AGENT_CORE_STATE_FEED_H_
#define EONCE_OUTBOX_AGENT_CORE_STATE_FEED_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "eonce/v1/agent.pb.h"

namespace eonce {

class StateFeed {
 public:
  // A set of states, one bit per OutboxState value (BitOf).
  using StateSet = uint64_t;
  static_assert(v1::OutboxState_ARRAYSIZE <= 64, "a StateSet holds every state");
  static constexpr StateSet kEveryState = ~StateSet{0};
  static constexpr StateSet BitOf(v1::OutboxState state) {
    return StateSet{1} << static_cast<int>(state);
  }

  class Subscription {
   public:
    // Blocks up to `timeout_ms` for the next notice; false on timeout or cut-off.
    bool Next(v1::WatchEvent* event, int64_t timeout_ms);
    bool cut_off() const;

   private:
    friend class StateFeed;
    mutable absl::Mutex mu_;
    StateSet states_ ABSL_GUARDED_BY(mu_) = kEveryState;
    std::deque<v1::WatchEvent> queue_ ABSL_GUARDED_BY(mu_);
    bool cut_off_ ABSL_GUARDED_BY(mu_) = false;
    std::function<void()> wake_ ABSL_GUARDED_BY(mu_);
  };

  explicit StateFeed(size_t max_queue = 4096, size_t max_subscribers = 64)
      : max_queue_(max_queue), max_subscribers_(max_subscribers) {}

  // Null when there are already max_subscribers. The subscriber hears of `states` only.
  std::shared_ptr<Subscription> Subscribe(std::function<void()> wake = nullptr,
                                          StateSet states = kEveryState);
  void Unsubscribe(const std::shared_ptr<Subscription>& subscription);
  // Whether some subscriber hears of `state`. A publisher asks after its change is in the
  // store: the fence orders that write before this read, as the feed's mutex did when
  // every notice took it, so that a subscriber who read the store after subscribing and
  // missed the change is seen here (and told of it).
  bool Wants(v1::OutboxState state) const {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    return (wanted_.load() & BitOf(state)) != 0;
  }
  void Publish(const v1::WatchEvent& event);
  // Publishes the notice of `record`'s current state, built only when someone hears of it.
  void Announce(const v1::OutboxRecord& record) {
    if (Wants(record.state())) Publish(EventOf(record));
  }
  // The notice for `record`'s current state, with its trace id and current attempt's span.
  static v1::WatchEvent EventOf(const v1::OutboxRecord& record);

 private:
  const size_t max_queue_;
  const size_t max_subscribers_;
  // The union of the subscribers' states, kept under mu_ as they come and go.
  void UpdateWantedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  std::vector<std::shared_ptr<Subscription>> subscribers_ ABSL_GUARDED_BY(mu_);
  std::atomic<StateSet> wanted_{0};
};

}  // namespace eonce

#endif  // EONCE_OUTBOX_AGENT_CORE_STATE_FEED_H_
