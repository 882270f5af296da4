#include "tests/util/test_pki.h"

#include <cstdlib>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace eonce::testing {
namespace {

absl::Status Run(const std::string& command, const std::string& log) {
  std::string line = absl::StrCat(command, " >>", log, " 2>&1");
  if (std::system(line.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("failed: ", command, " (see ", log, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TestPki> TestPki::Create(const std::string& dir, const std::string& name) {
  TestPki pki;
  pki.dir_ = dir;
  pki.name_ = name;
  pki.ca_file_ = absl::StrCat(dir, "/", name, "-ca.pem");
  pki.ca_key_ = absl::StrCat(dir, "/", name, "-ca.key");
  absl::Status made =
      Run(absl::StrCat("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes",
                       " -keyout ", pki.ca_key_, " -out ", pki.ca_file_,
                       " -days 2 -subj /CN=", name, " -addext basicConstraints=critical,CA:TRUE",
                       " -addext keyUsage=critical,keyCertSign,cRLSign"),
          absl::StrCat(dir, "/openssl.log"));
  if (!made.ok()) return made;
  return pki;
}

absl::StatusOr<TlsFiles> TestPki::Issue(const std::string& name, const std::string& spiffe_id,
                                        int days) const {
  std::string base = absl::StrCat(dir_, "/", name_, "-", name);
  std::string log = absl::StrCat(dir_, "/openssl.log");
  std::string san = "DNS:localhost,IP:127.0.0.1";
  if (!spiffe_id.empty()) san = absl::StrCat("URI:", spiffe_id, ",", san);
  {
    std::ofstream ext(base + ".ext");
    ext << "subjectAltName=" << san << "\n"
        << "basicConstraints=CA:FALSE\n"
        << "keyUsage=critical,digitalSignature,keyEncipherment\n"
        << "extendedKeyUsage=serverAuth,clientAuth\n";
  }
  absl::Status request =
      Run(absl::StrCat("openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ",
                       base, ".key -out ", base, ".csr -subj /CN=", name),
          log);
  if (!request.ok()) return request;
  absl::Status sign = Run(
      absl::StrCat("openssl x509 -req -in ", base, ".csr -CA ", ca_file_, " -CAkey ", ca_key_,
                   " -CAcreateserial -out ", base, ".pem -days ", days, " -extfile ", base, ".ext"),
      log);
  if (!sign.ok()) return sign;
  TlsFiles files;
  files.cert_file = base + ".pem";
  files.key_file = base + ".key";
  files.ca_file = ca_file_;
  files.refresh_s = 1;
  return files;
}

absl::Status TestPki::Revoke(const TlsFiles& leaf, const std::string& crl_dir) const {
  std::string base = absl::StrCat(dir_, "/", name_, "-ca");
  std::string log = absl::StrCat(dir_, "/openssl.log");
  std::string config = base + ".cnf";
  {
    std::ofstream index(base + ".index", std::ios::app);
    std::ofstream number(base + ".crlnumber", std::ios::app);
    if (number.tellp() == 0) number << "01\n";
    std::ofstream cnf(config);
    cnf << "[ca]\ndefault_ca = test\n[test]\n"
        << "database = " << base << ".index\n"
        << "crlnumber = " << base << ".crlnumber\n"
        << "certificate = " << ca_file_ << "\nprivate_key = " << ca_key_ << "\n"
        << "default_md = sha256\ndefault_crl_days = 2\n";
  }
  absl::Status revoked =
      Run(absl::StrCat("openssl ca -config ", config, " -revoke ", leaf.cert_file), log);
  if (!revoked.ok()) return revoked;
  absl::Status crl =
      Run(absl::StrCat("openssl ca -config ", config, " -gencrl -out ", base, ".crl"), log);
  if (!crl.ok()) return crl;
  return Run(absl::StrCat("cp ", base, ".crl ", crl_dir, "/$(openssl crl -hash -noout -in ", base,
                          ".crl).r0"),
             log);
}

std::string TenantId(const std::string& tenant, const std::string& workload) {
  return absl::StrCat("spiffe://eonce.test/tenant/", tenant, "/", workload);
}

}  // namespace eonce::testing
