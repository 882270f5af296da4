// The simulation's time: a queue of events on a manual clock, run in time order (ties in
// the order they were queued), so one seed always runs the same way.
#ifndef EONCE_TESTS_SIM_EVENT_LOOP_H_
#define EONCE_TESTS_SIM_EVENT_LOOP_H_

#include <cstdint>
#include <functional>
#include <queue>
#include <vector>

#include "common/base/clock.h"

namespace eonce::sim::internal {

class EventLoop {
 public:
  explicit EventLoop(ManualClock& clock) : clock_(clock) {}

  void At(int64_t at_ms, std::function<void()> fn) {
    queue_.push(Event{std::max(at_ms, clock_.NowMs()), next_seq_++, std::move(fn)});
  }
  void After(int64_t delay_ms, std::function<void()> fn) {
    At(clock_.NowMs() + delay_ms, std::move(fn));
  }
  bool Step() {
    if (queue_.empty()) return false;
    Event event = queue_.top();
    queue_.pop();
    clock_.SetMs(event.at_ms);
    ++steps_;
    event.fn();
    return true;
  }
  int64_t steps() const { return steps_; }

 private:
  struct Event {
    int64_t at_ms;
    uint64_t seq;
    std::function<void()> fn;
    bool operator>(const Event& other) const {
      return at_ms != other.at_ms ? at_ms > other.at_ms : seq > other.seq;
    }
  };
  ManualClock& clock_;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> queue_;
  uint64_t next_seq_ = 0;
  int64_t steps_ = 0;
};

}  // namespace eonce::sim::internal

#endif  // EONCE_TESTS_SIM_EVENT_LOOP_H_
