// Clock: the one source of "now" for every component.
//
// Only RealClock reads the system clock. Tests and the simulation use ManualClock, which
// moves only when told, so every run is deterministic. Times are milliseconds since the
// Unix epoch, the unit the wire contracts use. Implementations are thread-safe.
#ifndef EONCE_COMMON_BASE_CLOCK_H_
#define EONCE_COMMON_BASE_CLOCK_H_

#include <atomic>
#include <chrono>
#include <cstdint>

namespace eonce {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual int64_t NowMs() = 0;
  // Waits `ms` of this clock's time: a real sleep, or a ManualClock's step forward.
  virtual void SleepMs(int64_t ms) = 0;
};

class RealClock : public Clock {
 public:
  int64_t NowMs() override;
  void SleepMs(int64_t ms) override;
  // A process-wide instance; lives forever.
  static RealClock& Get();
};

class ManualClock : public Clock {
 public:
  explicit ManualClock(int64_t start_ms = 1'700'000'000'000) : now_ms_(start_ms) {}
  int64_t NowMs() override { return now_ms_.load(std::memory_order_relaxed); }
  void AdvanceMs(int64_t ms) { now_ms_.fetch_add(ms, std::memory_order_relaxed); }
  void SleepMs(int64_t ms) override { AdvanceMs(ms); }
  void SetMs(int64_t ms) { now_ms_.store(ms, std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> now_ms_;
};

// The wall-clock time point (what gRPC deadlines take) `deadline_ms` on `clock` stands
// for: now plus what is left of it (nothing, if it has passed).
std::chrono::system_clock::time_point WallDeadline(Clock& clock, int64_t deadline_ms);

// A relative timeout as a gRPC deadline: `ms` from now on the wall clock. With
// MsUntilWall, the only reads of the system clock outside the clocks themselves.
std::chrono::system_clock::time_point WallIn(int64_t ms);

// What is left until the wall-clock `deadline` (a gRPC call's), in ms; negative once past.
int64_t MsUntilWall(std::chrono::system_clock::time_point deadline);

}  // namespace eonce

#endif  // EONCE_COMMON_BASE_CLOCK_H_
