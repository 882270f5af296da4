// Fixed-width big-endian integers, in one place. Big-endian bytes sort in the order of
// the values they encode, which is what RocksDB keys (sequence numbers, due times) need.
#ifndef EONCE_COMMON_BASE_BIG_ENDIAN_H_
#define EONCE_COMMON_BASE_BIG_ENDIAN_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace eonce {

// Appends the low `bytes` bytes of `value`, most significant first.
inline void AppendBigEndian(std::string* out, uint64_t value, int bytes = 8) {
  for (int i = bytes - 1; i >= 0; --i) out->push_back(static_cast<char>(value >> (8 * i)));
}

// `value` as 8 big-endian bytes.
inline std::string BigEndian64(uint64_t value) {
  std::string out;
  out.reserve(8);
  AppendBigEndian(&out, value, 8);
  return out;
}

// The value of the first 8 bytes of `bytes` (of all of them when there are fewer).
inline uint64_t ReadBigEndian64(absl::string_view bytes) {
  uint64_t value = 0;
  for (size_t i = 0; i < 8 && i < bytes.size(); ++i) {
    value = (value << 8) | static_cast<unsigned char>(bytes[i]);
  }
  return value;
}

}  // namespace eonce

#endif  // EONCE_COMMON_BASE_BIG_ENDIAN_H_
