#include "common/rpc/tls.h"

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/command/command.h"
#include "common/rpc/identity_uri.h"
#include "common/rpc/metadata.h"
#include "common/base/status.h"
#include "grpc/grpc_security_constants.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/auth_context.h"
#include "grpcpp/security/tls_certificate_provider.h"
#include "grpcpp/security/tls_credentials_options.h"

namespace eonce {
namespace {

constexpr size_t kMaxPemBytes = 1 << 20;

absl::Status CheckPem(const std::string& path, const char* setting, const char* marker) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat(setting, ": cannot read ", path));
  std::ostringstream text;
  text << in.rdbuf();
  std::string pem = text.str();
  if (pem.size() > kMaxPemBytes) {
    return absl::InvalidArgumentError(absl::StrCat(setting, ": ", path, " is over 1 MiB"));
  }
  if (!absl::StrContains(pem, marker)) {
    return absl::InvalidArgumentError(
        absl::StrCat(setting, ": ", path, " holds no PEM block containing \"", marker, "\""));
  }
  return absl::OkStatus();
}

std::shared_ptr<grpc::experimental::FileWatcherCertificateProvider> Provider(
    const TlsFiles& files) {
  return std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      files.key_file, files.cert_file, files.ca_file, static_cast<unsigned int>(files.refresh_s));
}

}  // namespace

absl::Status ValidateTlsFiles(const TlsFiles& files) {
  if (!files.enabled()) return absl::OkStatus();
  if (files.cert_file.empty() || files.key_file.empty() || files.ca_file.empty()) {
    return absl::InvalidArgumentError(
        "tls_cert, tls_key, tls_ca: set all three (mutual TLS) or none (plaintext, and no "
        "tls_crl_dir)");
  }
  if (files.refresh_s < 1 || files.refresh_s > 3600) {
    return absl::InvalidArgumentError("tls_refresh_s: must be between 1 and 3600");
  }
  if (!files.crl_dir.empty()) {
    std::error_code error;
    if (!std::filesystem::is_directory(files.crl_dir, error)) {
      return absl::InvalidArgumentError(
          absl::StrCat("tls_crl_dir: ", files.crl_dir, " is not a directory"));
    }
  }
  EONCE_RETURN_IF_ERROR(CheckPem(files.cert_file, "tls_cert", "CERTIFICATE"));
  EONCE_RETURN_IF_ERROR(CheckPem(files.key_file, "tls_key", "PRIVATE KEY"));
  return CheckPem(files.ca_file, "tls_ca", "CERTIFICATE");
}

std::shared_ptr<grpc::ServerCredentials> ServerCredentials(const TlsFiles& files) {
  if (!files.enabled()) return grpc::InsecureServerCredentials();
  grpc::experimental::TlsServerCredentialsOptions options(Provider(files));
  options.watch_root_certs();
  options.watch_identity_key_cert_pairs();
  options.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  if (!files.crl_dir.empty()) options.set_crl_directory(files.crl_dir);
  return grpc::experimental::TlsServerCredentials(options);
}

std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials(const TlsFiles& files) {
  if (!files.enabled()) return grpc::InsecureChannelCredentials();
  grpc::experimental::TlsChannelCredentialsOptions options;
  options.set_certificate_provider(Provider(files));
  options.watch_root_certs();
  options.watch_identity_key_cert_pairs();
  if (!files.crl_dir.empty()) options.set_crl_directory(files.crl_dir);
  return grpc::experimental::TlsCredentials(options);
}

std::shared_ptr<grpc::Channel> NewChannel(const std::string& address, const TlsFiles& files,
                                          int max_message_bytes) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetInt(GRPC_ARG_ENABLE_RETRIES, 0);
  args.SetMaxReceiveMessageSize(max_message_bytes);
  args.SetMaxSendMessageSize(max_message_bytes);
  return grpc::CreateCustomChannel(address, ChannelCredentials(files), args);
}

namespace {

// The one name the certificate's URI SANs give through `name_of`, or "" when they give
// none or several.
std::string OneNameFromCertificate(const grpc::AuthContext& auth,
                                   std::string (*name_of)(absl::string_view)) {
  std::set<std::string> names;
  for (const char* property : {GRPC_PEER_SPIFFE_ID_PROPERTY_NAME, GRPC_PEER_URI_PROPERTY_NAME}) {
    for (const grpc::string_ref& uri : auth.FindPropertyValues(property)) {
      std::string named = name_of(absl::string_view(uri.data(), uri.size()));
      if (!named.empty()) names.insert(std::move(named));
    }
  }
  return names.size() == 1 ? *names.begin() : "";
}

}  // namespace

std::string CallerWorkload(const grpc::ServerContextBase& context) {
  std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth == nullptr || !auth->IsPeerAuthenticated()) {
    return RequestMetadata(context, kWorkloadHeader);
  }
  return OneNameFromCertificate(*auth, &WorkloadFromSpiffeId);
}

std::optional<int64_t> CertificateEpoch(const grpc::ServerContextBase& context) {
  std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth == nullptr || !auth->IsPeerAuthenticated()) return std::nullopt;
  std::set<int64_t> epochs;
  for (const grpc::string_ref& uri : auth->FindPropertyValues(GRPC_PEER_URI_PROPERTY_NAME)) {
    if (auto epoch = EpochFromUri(absl::string_view(uri.data(), uri.size()))) {
      epochs.insert(*epoch);
    }
  }
  return epochs.size() == 1 ? *epochs.begin() : 0;
}

std::string CallerOperator(const grpc::ServerContextBase& context) {
  std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth == nullptr || !auth->IsPeerAuthenticated()) {
    return RequestMetadata(context, kOperatorHeader);
  }
  return OneNameFromCertificate(*auth, &OperatorFromSpiffeId);
}

absl::StatusOr<std::string> CallerTenant(const grpc::ServerContextBase& context) {
  std::string claimed = RequestMetadata(context, kTenantHeader);
  std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth == nullptr || !auth->IsPeerAuthenticated()) return claimed;
  // Every URI SAN is looked at: a certificate that names two tenants names none.
  std::set<std::string> tenants;
  for (const char* property : {GRPC_PEER_SPIFFE_ID_PROPERTY_NAME, GRPC_PEER_URI_PROPERTY_NAME}) {
    for (const grpc::string_ref& uri : auth->FindPropertyValues(property)) {
      std::string named = TenantFromSpiffeId(absl::string_view(uri.data(), uri.size()));
      if (!named.empty()) tenants.insert(std::move(named));
    }
  }
  if (tenants.size() > 1) {
    return Error(absl::StatusCode::kPermissionDenied, "AMBIGUOUS_TENANT",
                 "the client certificate names more than one tenant");
  }
  std::string tenant = tenants.empty() ? "" : *tenants.begin();
  if (tenant.empty()) {
    return Error(absl::StatusCode::kPermissionDenied, "NO_TENANT_IN_CERTIFICATE",
                 "the client certificate names no tenant (URI SAN "
                 "spiffe://<domain>/tenant/<tenant>/...)");
  }
  if (!claimed.empty() && claimed != tenant) {
    return Error(absl::StatusCode::kPermissionDenied, "TENANT_MISMATCH",
                 absl::StrCat("the client certificate is tenant \"", tenant,
                              "\"; it may not act for \"", claimed, "\""));
  }
  return tenant;
}

}  // namespace eonce
