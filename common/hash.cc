#include "common/big_endian.h"
#include "common/hash.h"

#include <openssl/evp.h>

#include "absl/strings/escaping.h"

namespace eonce {
namespace {

}  // namespace

std::string Sha256(absl::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_Digest(data.data(), data.size(), digest, &length, EVP_sha256(), nullptr);
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
