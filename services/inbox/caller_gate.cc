#include "services/inbox/caller_gate.h"

#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/command/command.h"
#include "common/rpc/identity_uri.h"
#include "common/rpc/metadata.h"
#include "common/base/status.h"
#include "grpc/grpc_security.h"
#include "grpcpp/security/auth_context.h"
#include "grpcpp/security/auth_metadata_processor.h"

namespace eonce {
namespace {

constexpr char kThroughTheSidecar[] =
    "a business port admits eonce components and operators only; tenants reach the "
    "business through its sidecar";

absl::Status NotAllowed(const std::string& who) {
  return Error(absl::StatusCode::kPermissionDenied, "BUSINESS_CALLER_NOT_ALLOWED",
               absl::StrCat(who, ": ", kThroughTheSidecar));
}

absl::StatusOr<BusinessCaller> FromCertificate(const CallerClaims& claims) {
  std::set<std::string> components, operators, tenants;
  std::string operator_tenant;
  for (const std::string& uri : claims.certificate_uris) {
    if (std::string component = ComponentFromSpiffeId(uri); !component.empty()) {
      components.insert(component);
    }
    if (std::string name = OperatorFromSpiffeId(uri); !name.empty()) {
      operators.insert(name);
      operator_tenant = TenantFromSpiffeId(uri);
    }
    if (std::string tenant = TenantFromSpiffeId(uri); !tenant.empty()) tenants.insert(tenant);
  }
  if (components.size() == 1) {
    return BusinessCaller{BusinessCaller::Kind::kComponent, *components.begin(), claims.tenant};
  }
  if (components.size() > 1) return NotAllowed("the client certificate names two components");
  if (operators.size() > 1) return NotAllowed("the client certificate names two operators");
  if (operators.empty()) {
    return NotAllowed(tenants.empty()
                          ? "the client certificate names no eonce component "
                            "(spiffe://<domain>/eonce/<component>) and no operator"
                          : absl::StrCat("the client certificate is a workload of tenant \"",
                                         *tenants.begin(), "\", not a component or an operator"));
  }
  if (tenants.size() > 1) {
    return Error(absl::StatusCode::kPermissionDenied, "AMBIGUOUS_TENANT",
                 "the client certificate names more than one tenant");
  }
  if (!claims.tenant.empty() && claims.tenant != operator_tenant) {
    return Error(absl::StatusCode::kPermissionDenied, "TENANT_MISMATCH",
                 absl::StrCat("the client certificate is an operator of tenant \"",
                              operator_tenant, "\"; it may not act for \"", claims.tenant, "\""));
  }
  return BusinessCaller{BusinessCaller::Kind::kOperator, *operators.begin(), operator_tenant};
}

absl::StatusOr<BusinessCaller> FromHeaders(const CallerClaims& claims) {
  if (!claims.component.empty()) {
    return BusinessCaller{BusinessCaller::Kind::kComponent, claims.component, claims.tenant};
  }
  if (!claims.operator_name.empty()) {
    return BusinessCaller{BusinessCaller::Kind::kOperator, claims.operator_name, claims.tenant};
  }
  if (!claims.workload.empty()) {
    return NotAllowed(absl::StrCat("workload \"", claims.workload, "\" of tenant \"",
                                   claims.tenant, "\" is not a component or an operator"));
  }
  return Error(absl::StatusCode::kUnauthenticated, "NO_IDENTITY",
               absl::StrCat("the call states no caller (", kComponentHeader, " or ",
                            kOperatorHeader, "); ", kThroughTheSidecar));
}

// What gRPC sends for a refusal made before the call reaches a handler: the message only,
// so it carries the reason first.
std::string RefusalMessage(const absl::Status& status) {
  return absl::StrCat(ReasonOf(status), ": ", status.message());
}

// The URI SANs of an authenticated peer's certificate, as gRPC lists them.
std::vector<std::string> CertificateUris(const grpc::AuthContext& auth) {
  std::vector<std::string> uris;
  for (const char* property : {GRPC_PEER_SPIFFE_ID_PROPERTY_NAME, GRPC_PEER_URI_PROPERTY_NAME}) {
    for (const grpc::string_ref& uri : auth.FindPropertyValues(property)) {
      uris.emplace_back(uri.data(), uri.size());
    }
  }
  return uris;
}

std::string Text(const grpc_slice& slice) {
  return std::string(reinterpret_cast<const char*>(GRPC_SLICE_START_PTR(slice)),
                     GRPC_SLICE_LENGTH(slice));
}

// Over mutual TLS: gRPC's C++ wrapper calls this with the call's metadata and the
// connection's peer.
class CertificateGate : public grpc::AuthMetadataProcessor {
 public:
  // Runs on the call's own thread: it reads memory only.
  bool IsBlocking() const override { return false; }

  grpc::Status Process(const InputMetadata& metadata, grpc::AuthContext* context,
                       OutputMetadata* /*consumed*/, OutputMetadata* /*response*/) override {
    auto header = [&metadata](absl::string_view name) {
      auto it = metadata.find(grpc::string_ref(name.data(), name.size()));
      return it == metadata.end() ? std::string() : std::string(it->second.data(), it->second.size());
    };
    if (OpenToEveryCaller(header(":path"))) return grpc::Status::OK;
    CallerClaims claims;
    claims.authenticated = context != nullptr && context->IsPeerAuthenticated();
    if (claims.authenticated) claims.certificate_uris = CertificateUris(*context);
    claims.tenant = header(kTenantHeader);
    claims.method = header(":path");
    absl::StatusOr<BusinessCaller> caller = DecideBusinessCaller(claims);
    if (caller.ok()) return grpc::Status::OK;
    return grpc::Status(static_cast<grpc::StatusCode>(caller.status().code()),
                        RefusalMessage(caller.status()));
  }
};

// Over plaintext: gRPC's C++ insecure credentials take no processor, so these are the
// core's insecure credentials with the gate set through the C API.
void ProcessPlaintext(void* /*state*/, grpc_auth_context* /*context*/, const grpc_metadata* md,
                      size_t num_md, grpc_process_auth_metadata_done_cb done, void* user_data) {
  CallerClaims claims;
  // The first value of a header sent twice, as RequestMetadata reads it.
  auto take = [](std::string& into, const grpc_slice& value) {
    if (into.empty()) into = Text(value);
  };
  for (size_t i = 0; i < num_md; ++i) {
    const std::string key = Text(md[i].key);
    if (key == ":path") {
      take(claims.method, md[i].value);
    } else if (key == kComponentHeader) {
      take(claims.component, md[i].value);
    } else if (key == kOperatorHeader) {
      take(claims.operator_name, md[i].value);
    } else if (key == kWorkloadHeader) {
      take(claims.workload, md[i].value);
    } else if (key == kTenantHeader) {
      take(claims.tenant, md[i].value);
    }
  }
  if (OpenToEveryCaller(claims.method)) {
    done(user_data, nullptr, 0, nullptr, 0, GRPC_STATUS_OK, nullptr);
    return;
  }
  absl::StatusOr<BusinessCaller> caller = DecideBusinessCaller(claims);
  if (caller.ok()) {
    done(user_data, nullptr, 0, nullptr, 0, GRPC_STATUS_OK, nullptr);
    return;
  }
  const std::string message = RefusalMessage(caller.status());
  done(user_data, nullptr, 0, nullptr, 0, static_cast<grpc_status_code>(caller.status().code()),
       message.c_str());
}

class PlaintextGateCredentials : public grpc::ServerCredentials {
 public:
  void SetAuthMetadataProcessor(
      const std::shared_ptr<grpc::AuthMetadataProcessor>& /*processor*/) override {
    // The gate is this class's one processor.
  }

 private:
  int AddPortToServer(const std::string& address, grpc_server* server) override {
    grpc_server_credentials* credentials = grpc_insecure_server_credentials_create();
    grpc_server_credentials_set_auth_metadata_processor(
        credentials, grpc_auth_metadata_processor{&ProcessPlaintext, nullptr, nullptr});
    int port = grpc_server_add_http2_port(server, address.c_str(), credentials);
    grpc_server_credentials_release(credentials);  // the server holds its own reference
    return port;
  }
};

}  // namespace

absl::StatusOr<BusinessCaller> DecideBusinessCaller(const CallerClaims& claims) {
  absl::StatusOr<BusinessCaller> caller =
      claims.authenticated ? FromCertificate(claims) : FromHeaders(claims);
  if (caller.ok() && caller->kind == BusinessCaller::Kind::kOperator && !claims.method.empty() &&
      !OperatorMayCall(claims.method)) {
    return Error(absl::StatusCode::kPermissionDenied, "COMPONENT_REQUIRED",
                 absl::StrCat(claims.method.substr(0, 256),
                              ": only eonce's components may call it on a business port; an "
                              "operator reads effects and outcomes here, and acts through "
                              "the sidecar"));
  }
  return caller;
}

bool OperatorMayCall(absl::string_view method) {
  return method == "/eonce.v1.Effects/ListEffects" || method == "/eonce.v1.Outcome/QueryOutcome";
}

bool OpenToEveryCaller(absl::string_view method) {
  return absl::StartsWith(method, "/grpc.health.v1.Health/") ||
         absl::StartsWith(method, "/grpc.reflection.v1alpha.ServerReflection/") ||
         absl::StartsWith(method, "/grpc.reflection.v1.ServerReflection/");
}

std::shared_ptr<grpc::ServerCredentials> BusinessServerCredentials(const TlsFiles& tls) {
  if (!tls.enabled()) return std::make_shared<PlaintextGateCredentials>();
  std::shared_ptr<grpc::ServerCredentials> credentials = ServerCredentials(tls);
  credentials->SetAuthMetadataProcessor(std::make_shared<CertificateGate>());
  return credentials;
}

absl::StatusOr<BusinessCaller> BusinessCallerOf(const grpc::ServerContextBase& context) {
  CallerClaims claims;
  std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  claims.authenticated = auth != nullptr && auth->IsPeerAuthenticated();
  if (claims.authenticated) {
    claims.certificate_uris = CertificateUris(*auth);
  } else {
    claims.component = RequestMetadata(context, kComponentHeader);
    claims.operator_name = RequestMetadata(context, kOperatorHeader);
    claims.workload = RequestMetadata(context, kWorkloadHeader);
  }
  claims.tenant = RequestMetadata(context, kTenantHeader);
  return DecideBusinessCaller(claims);
}

}  // namespace eonce
