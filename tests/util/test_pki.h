// TestPki: a throwaway certificate authority for tests, made at test time with the
// openssl command. Every leaf certificate names 127.0.0.1 and localhost, so that it
// serves as a server certificate on loopback as well as a client certificate.
#ifndef EONCE_TESTS_UTIL_TEST_PKI_H_
#define EONCE_TESTS_UTIL_TEST_PKI_H_

#include <string>

#include "absl/status/statusor.h"
#include "common/rpc/tls.h"

namespace eonce::testing {

class TestPki {
 public:
  // Creates a CA named `name` in `dir` (EC P-256, valid for two days).
  static absl::StatusOr<TestPki> Create(const std::string& dir, const std::string& name);

  // Issues a certificate for `name`, signed by this CA. `spiffe_id` (may be empty) becomes
  // a URI SAN. `days` < 0 gives a certificate that has already expired.
  absl::StatusOr<TlsFiles> Issue(const std::string& name, const std::string& spiffe_id,
                                 int days = 2) const;

  // Revokes `leaf` (issued by this CA) and writes this CA's revocation list into
  // `crl_dir` under its hashed name, as `openssl rehash` would.
  absl::Status Revoke(const TlsFiles& leaf, const std::string& crl_dir) const;

  const std::string& ca_file() const { return ca_file_; }

 private:
  std::string dir_;
  std::string name_;
  std::string ca_file_;
  std::string ca_key_;
};

// The SPIFFE id eonce reads a tenant from: spiffe://eonce.test/tenant/<tenant>/<workload>.
std::string TenantId(const std::string& tenant, const std::string& workload);

}  // namespace eonce::testing

#endif  // EONCE_TESTS_UTIL_TEST_PKI_H_
