#include "common/base/clock.h"

#include <algorithm>

#include <chrono>
#include <thread>

namespace eonce {

int64_t RealClock::NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void RealClock::SleepMs(int64_t ms) {
  if (ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

RealClock& RealClock::Get() {
  static RealClock* clock = new RealClock();
  return *clock;
}

std::chrono::system_clock::time_point WallDeadline(Clock& clock, int64_t deadline_ms) {
  return WallIn(std::max<int64_t>(0, deadline_ms - clock.NowMs()));
}

std::chrono::system_clock::time_point WallIn(int64_t ms) {
  return std::chrono::system_clock::now() + std::chrono::milliseconds(ms);
}

int64_t MsUntilWall(std::chrono::system_clock::time_point deadline) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             deadline - std::chrono::system_clock::now())
      .count();
}

}  // namespace eonce
