// ChanceFaults: a FaultInjector that fires chosen fault points with a probability, drawn
// from an injected Random, so a run is reproducible from its seed. Thread-safe.
#ifndef EONCE_COMMON_BASE_CHANCE_FAULTS_H_
#define EONCE_COMMON_BASE_CHANCE_FAULTS_H_

#include <array>
#include <atomic>

#include "common/base/fault.h"
#include "common/base/random.h"

namespace eonce {

class ChanceFaults : public FaultInjector {
 public:
  // Fired points return `error`.
  ChanceFaults(Random& random, absl::Status error) : random_(random), error_(std::move(error)) {
    for (auto& p : probability_) p = 0;
    for (auto& f : fired_) f = 0;
  }

  void Arm(FaultPoint point, double probability) {
    probability_[static_cast<int>(point)] = probability;
  }

  absl::Status Hit(FaultPoint point) override {
    int i = static_cast<int>(point);
    double p = probability_[i].load();
    if (p <= 0 || !random_.Chance(p)) return absl::OkStatus();
    fired_[i]++;
    return error_;
  }

  int64_t fired(FaultPoint point) const { return fired_[static_cast<int>(point)].load(); }

 private:
  Random& random_;
  const absl::Status error_;
  std::array<std::atomic<double>, static_cast<int>(FaultPoint::kCount)> probability_;
  std::array<std::atomic<int64_t>, static_cast<int>(FaultPoint::kCount)> fired_;
};

}  // namespace eonce

#endif  // EONCE_COMMON_BASE_CHANCE_FAULTS_H_
