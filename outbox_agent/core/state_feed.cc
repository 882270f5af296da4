#include "outbox_agent/core/state_feed.h"

#include <algorithm>

#include "absl/time/time.h"
#include "common/command/trace_context.h"

namespace eonce {

bool StateFeed::Subscription::Next(v1::WatchEvent* event, int64_t timeout_ms) {
  absl::MutexLock lock(&mu_);
  auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !queue_.empty() || cut_off_; };
  mu_.AwaitWithTimeout(absl::Condition(&ready), absl::Milliseconds(timeout_ms));
  if (queue_.empty()) return false;
  *event = std::move(queue_.front());
  queue_.pop_front();
  return true;
}

bool StateFeed::Subscription::cut_off() const {
  absl::MutexLock lock(&mu_);
  return cut_off_;
}

std::shared_ptr<StateFeed::Subscription> StateFeed::Subscribe(std::function<void()> wake,
                                                              StateSet states) {
  absl::MutexLock lock(&mu_);
  if (subscribers_.size() >= max_subscribers_) return nullptr;
  auto subscription = std::make_shared<Subscription>();
  {
    absl::MutexLock inner(&subscription->mu_);
    subscription->wake_ = std::move(wake);
    subscription->states_ = states;
  }
  subscribers_.push_back(subscription);
  UpdateWantedLocked();
  // Before the subscriber reads the store (Wants has the other half).
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return subscription;
}

void StateFeed::Unsubscribe(const std::shared_ptr<Subscription>& subscription) {
  absl::MutexLock lock(&mu_);
  subscribers_.erase(std::remove(subscribers_.begin(), subscribers_.end(), subscription),
                     subscribers_.end());
  UpdateWantedLocked();
}

void StateFeed::UpdateWantedLocked() {
  StateSet wanted = 0;
  for (const auto& subscriber : subscribers_) {
    absl::MutexLock inner(&subscriber->mu_);
    wanted |= subscriber->states_;
  }
  wanted_.store(wanted);
}

void StateFeed::Publish(const v1::WatchEvent& event) {
  std::vector<std::function<void()>> wakes;
  {
    absl::MutexLock lock(&mu_);
    for (auto& subscriber : subscribers_) {
      absl::MutexLock inner(&subscriber->mu_);
      if (subscriber->cut_off_ || (subscriber->states_ & BitOf(event.state())) == 0) continue;
      if (subscriber->queue_.size() >= max_queue_) {
        subscriber->cut_off_ = true;
      } else {
        subscriber->queue_.push_back(event);
      }
      if (subscriber->wake_) wakes.push_back(subscriber->wake_);
    }
  }
  for (auto& wake : wakes) wake();
}

v1::WatchEvent StateFeed::EventOf(const v1::OutboxRecord& record) {
  v1::WatchEvent event;
  event.set_command_id(record.command().command_id());
  event.set_state(record.state());
  event.set_at_ms(record.updated_at_ms());
  event.set_trace_id(TraceIdOf(record.command().trace()));
  event.set_span_id(record.attempt_span_id());
  return event;
}

}  // namespace eonce
