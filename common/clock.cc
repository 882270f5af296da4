#include "common/clock.h"

#include <chrono>

namespace eonce {

int64_t RealClock::NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

RealClock& RealClock::Get() {
  static RealClock* clock = new RealClock();
  return *clock;
}

}  // namespace eonce
