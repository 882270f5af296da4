// SHA-256 and the versioned payload hash of the command envelope (proto/eonce/v1).
#ifndef EONCE_COMMON_BASE_HASH_H_
#define EONCE_COMMON_BASE_HASH_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace eonce {

inline constexpr uint32_t kPayloadHashVersion = 1;

// The 32-byte digest of `data`.
std::string Sha256(absl::string_view data);

// Version 1 of the payload hash: SHA-256 over a domain tag, then the length-prefixed
// target method and request bytes. See PayloadHash in command.proto.
std::string PayloadHashV1(absl::string_view target_method, absl::string_view request);

std::string HexOf(absl::string_view bytes);

}  // namespace eonce

#endif  // EONCE_COMMON_BASE_HASH_H_
