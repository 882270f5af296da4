#include "common/rpc/tls_flags.h"

#include <string>

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate this process presents (mutual TLS; with tls_key and tls_ca)");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of tls_cert");
ABSL_FLAG(std::string, tls_ca, "", "PEM CA bundle that signs the peers' certificates");
ABSL_FLAG(std::string, tls_crl_dir, "",
          "directory of hashed CRL files (openssl rehash); peers whose certificate is "
          "revoked there are refused");
ABSL_FLAG(int32_t, tls_refresh_s, 10,
          "how often the TLS files are re-read; new connections use the new ones");

namespace eonce {

TlsFiles TlsFilesFromFlags() {
  TlsFiles files;
  files.cert_file = absl::GetFlag(FLAGS_tls_cert);
  files.key_file = absl::GetFlag(FLAGS_tls_key);
  files.ca_file = absl::GetFlag(FLAGS_tls_ca);
  files.refresh_s = absl::GetFlag(FLAGS_tls_refresh_s);
  files.crl_dir = absl::GetFlag(FLAGS_tls_crl_dir);
  return files;
}

}  // namespace eonce
