// HeldOpen: a test's hold on one of gRPC's threads. Captured (through a shared_ptr) in the
// callback of an asynchronous call, it is destroyed with the callback's closure, which
// gRPC does on its own thread after the callback ran; there it waits until `let_go` is
// notified, holding the closure, and what the closure owns, alive.
//
// gRPC 1.51 also copies the callback on the calling thread while it starts the call, and
// a copy that outlives the call's own closure is its last owner: destroyed there, on the
// caller's thread, it holds nothing (it would only block the test) and says so through
// `gone_on_caller`; the test then tries again.
#ifndef EONCE_TESTS_UTIL_HELD_OPEN_H_
#define EONCE_TESTS_UTIL_HELD_OPEN_H_

#include <atomic>
#include <thread>

#include "absl/synchronization/notification.h"

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

}  // namespace eonce::testing

#endif  // EONCE_TESTS_UTIL_HELD_OPEN_H_
