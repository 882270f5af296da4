// A business's fault injector that loses one answer, after the effect is durable, once
// armed: the sidecar sees an error that proves nothing (as after a crash or a dropped
// connection), and only a retry can learn what happened.
#ifndef EONCE_TESTS_UTIL_LOSE_ONE_ANSWER_H_
#define EONCE_TESTS_UTIL_LOSE_ONE_ANSWER_H_

#include <atomic>

#include "absl/status/status.h"
#include "common/base/fault.h"

namespace eonce {

class LoseOneAnswer : public FaultInjector {
 public:
  absl::Status Hit(FaultPoint point) override {
    if (point == FaultPoint::kAfterApplyBeforeResponse && armed.exchange(false)) {
      return absl::UnavailableError("answer lost after apply");
    }
    return absl::OkStatus();
  }
  std::atomic<bool> armed{false};
};

}  // namespace eonce

#endif  // EONCE_TESTS_UTIL_LOSE_ONE_ANSWER_H_
