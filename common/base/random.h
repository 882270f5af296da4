// Random: the one source of randomness (jitter, ids, fault decisions).
//
// Only RealRandom seeds itself from the system. SeededRandom replays the same sequence for
// the same seed, which is what makes a simulation run reproducible. Both are thread-safe.
#ifndef EONCE_COMMON_BASE_RANDOM_H_
#define EONCE_COMMON_BASE_RANDOM_H_

#include <cstdint>
#include <random>
#include <string>

#include "absl/synchronization/mutex.h"

namespace eonce {

class Random {
 public:
  virtual ~Random() = default;
  virtual uint64_t Next() = 0;
  // Uniform in [0, n); n == 0 gives 0.
  uint64_t Uniform(uint64_t n) { return n == 0 ? 0 : Next() % n; }
  // True with probability p.
  bool Chance(double p) { return static_cast<double>(Next() >> 11) * 0x1.0p-53 < p; }
  // 128 random bits as 32 hex digits, for ids.
  std::string HexId();
};

class SeededRandom : public Random {
 public:
  explicit SeededRandom(uint64_t seed) : engine_(seed) {}
  uint64_t Next() override;

 private:
  absl::Mutex mu_;
  std::mt19937_64 engine_ ABSL_GUARDED_BY(mu_);
};

class RealRandom : public Random {
 public:
  RealRandom();
  uint64_t Next() override;
  static RealRandom& Get();

 private:
  absl::Mutex mu_;
  std::mt19937_64 engine_ ABSL_GUARDED_BY(mu_);
};

}  // namespace eonce

#endif  // EONCE_COMMON_BASE_RANDOM_H_
