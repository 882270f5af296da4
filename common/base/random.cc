#include "common/base/random.h"

#include "absl/strings/str_format.h"

namespace eonce {

std::string Random::HexId() {
  return absl::StrFormat("%016x%016x", Next(), Next());
}

uint64_t SeededRandom::Next() {
  absl::MutexLock lock(&mu_);
  return engine_();
}

RealRandom::RealRandom() {
  std::random_device device;
  std::seed_seq seq{device(), device(), device(), device()};
  engine_.seed(seq);
}

uint64_t RealRandom::Next() {
  absl::MutexLock lock(&mu_);
  return engine_();
}

RealRandom& RealRandom::Get() {
  static RealRandom* random = new RealRandom();
  return *random;
}

}  // namespace eonce
