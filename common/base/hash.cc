#include "common/base/big_endian.h"
#include "common/base/hash.h"

#include <openssl/evp.h>

#include "absl/strings/escaping.h"

namespace eonce {
namespace {

// Fetched once. With OpenSSL 3, EVP_sha256() makes every digest look its implementation
// up again, under a lock that the threads hashing at once contend for (half the cost of
// hashing a command).
const EVP_MD* Sha256Method() {
  static const EVP_MD* const method = [] {
    const EVP_MD* fetched = EVP_MD_fetch(nullptr, "SHA256", nullptr);
    return fetched != nullptr ? fetched : EVP_sha256();
  }();
  return method;
}

}  // namespace

std::string Sha256(absl::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_Digest(data.data(), data.size(), digest, &length, Sha256Method(), nullptr);
  return std::string(reinterpret_cast<char*>(digest), length);
}

std::string PayloadHashV1(absl::string_view target_method, absl::string_view request) {
  std::string framed("eonce.payload.v1");
  framed.push_back('\0');
  AppendBigEndian(&framed, target_method.size(), 4);
  framed.append(target_method.data(), target_method.size());
  AppendBigEndian(&framed, request.size(), 8);
  framed.append(request.data(), request.size());
  return Sha256(framed);
}

std::string HexOf(absl::string_view bytes) { return absl::BytesToHexString(bytes); }

}  // namespace eonce
