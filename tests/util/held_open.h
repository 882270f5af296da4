// ClosureHold: a test's hold on a call's callback closure, on one of gRPC's threads.
//
// gRPC destroys a callback's closure on its own thread after the callback ran. A HeldOpen
// captured (through a shared_ptr) in the callback goes with the closure, and there waits
// until the test lets it go, holding the closure, and what it owns, alive. The calling
// thread holds copies of the callback too while it starts the call (the test's, and gRPC
// 1.51's own); should the call be answered before they are gone, a copy is the last
// owner. So the test holds the answer back until the call's start has returned (Take's
// `answer`: the server's hold is let go there); a HeldOpen whose last owner was the
// calling thread all the same holds nothing (it would only block the test), says so, and
// Take starts another call.
#ifndef EONCE_TESTS_UTIL_HELD_OPEN_H_
#define EONCE_TESTS_UTIL_HELD_OPEN_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace eonce::testing {

class HeldOpen {
 public:
  HeldOpen(absl::Notification* let_go, std::atomic<bool>* gone_on_caller)
      : let_go_(let_go), gone_on_caller_(gone_on_caller), caller_(std::this_thread::get_id()) {}
  HeldOpen(const HeldOpen&) = delete;
  HeldOpen& operator=(const HeldOpen&) = delete;
  ~HeldOpen() {
    if (std::this_thread::get_id() == caller_) {
      gone_on_caller_->store(true);
      return;
    }
    let_go_->WaitForNotification();
  }

 private:
  absl::Notification* const let_go_;
  std::atomic<bool>* const gone_on_caller_;
  const std::thread::id caller_;
};

class ClosureHold {
 public:
  // Starts a call: its callback captures `held` and calls `answered`.
  using Start =
      std::function<void(std::shared_ptr<HeldOpen> held, std::function<void()> answered)>;

  ~ClosureHold() {
    if (!let_go_.HasBeenNotified()) let_go_.Notify();  // a test that stopped early
  }

  // Starts calls until gRPC's own closure holds one (at most 20); false if none did, or
  // a call was not answered within 10 s. `answer` runs once each call's start has
  // returned: it lets the answer go, which the server held back (under load the answer
  // could otherwise come before the calling thread let go of its copies, every time).
  bool Take(const Start& start, const std::function<void()>& answer) {
    for (int attempt = 0; attempt < 20 && gone_on_caller_.load(); ++attempt) {
      gone_on_caller_.store(false);
      auto answered = std::make_shared<absl::Notification>();
      start(std::make_shared<HeldOpen>(&let_go_, &gone_on_caller_),
            [answered] { answered->Notify(); });
      answer();
      if (!answered->WaitForNotificationWithTimeout(absl::Seconds(10))) return false;
    }
    return !gone_on_caller_.load();
  }

  // Runs `end` on a thread of its own, lets the closure go 300 ms later, and waits for
  // `end`; true if it returned while the closure was still held.
  bool EndedWhileHeld(std::function<void()> end) {
    absl::Notification ended;
    std::thread thread([&] {
      end();
      ended.Notify();
    });
    const bool early = ended.WaitForNotificationWithTimeout(absl::Milliseconds(300));
    let_go_.Notify();
    thread.join();
    return early;
  }

 private:
  absl::Notification let_go_;
  std::atomic<bool> gone_on_caller_{true};
};

// AnswerGate: a server's answers held back until the test lets them go (ClosureHold::Take's
// `answer`). The answering thread calls Hold, which returns once Answer or LetAllGo has
// let it go. Whoever owns the gate lets all go before the server ends.
class AnswerGate {
 public:
  void Hold() {
    absl::MutexLock lock(&mu_);
    const uint64_t mine = arrived_++;
    auto let_go = [this, mine]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return all_ || let_go_ > mine;
    };
    mu_.Await(absl::Condition(&let_go));
  }

  // Lets go the answers held so far, once one is (waiting at most 10 s for it).
  void Answer() {
    absl::MutexLock lock(&mu_);
    auto one_held = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return arrived_ > let_go_; };
    mu_.AwaitWithTimeout(absl::Condition(&one_held), absl::Seconds(10));
    let_go_ = arrived_;
  }

  // Holds nothing from now on.
  void LetAllGo() {
    absl::MutexLock lock(&mu_);
    all_ = true;
  }

 private:
  absl::Mutex mu_;
  uint64_t arrived_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t let_go_ ABSL_GUARDED_BY(mu_) = 0;
  bool all_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace eonce::testing

#endif  // EONCE_TESTS_UTIL_HELD_OPEN_H_
