// The caller gate of a business port (ServiceHost): a business admits eonce's own
// components -- the sidecar, a relay of its outbox, a ground-truth checker -- which may
// state any tenant they act for, and operators, who act for their own tenant only.
// Tenants reach the business through the sidecar, never directly.
//
// The check runs in gRPC's transport security (an auth metadata processor on the port's
// credentials), before any service's handler: every service on the port, one added later
// included, is behind it, and a refused call runs nothing. (gRPC 1.51's server
// interceptors cannot end a call before its handler runs.)
//
// Over mutual TLS the certificate's URI SANs say who the caller is:
//   spiffe://<trust domain>/eonce/<component>                 a component
//   spiffe://<trust domain>/tenant/<tenant>/operator/<name>   an operator of <tenant>
// and the eonce-component and eonce-operator headers are ignored; an eonce-tenant header
// other than an operator's own tenant is refused. A certificate that names a component
// is a component, whatever else it names (a relay's may also name its workload).
// Over plaintext (a unix socket or a loopback port: the pod-local hop and local
// development; or --insecure) the caller states it: `eonce-component: <name>` or
// `eonce-operator: <name>`, and its tenant in eonce-tenant.
//
// Refusals (reason first in the message, which is all gRPC sends for a refusal made
// there; common/rpc/grpc_status.h reads the reason back from it):
//   UNAUTHENTICATED    NO_IDENTITY                  plaintext, and no component or operator
//                                                   stated
//   PERMISSION_DENIED  BUSINESS_CALLER_NOT_ALLOWED  a tenant's workload, a certificate that
//                                                   names no component and no operator, or
//                                                   names two of either
//   PERMISSION_DENIED  COMPONENT_REQUIRED           an operator calling anything but a
//                                                   read of effects or outcomes
//   PERMISSION_DENIED  TENANT_MISMATCH              an operator stating another tenant
//   PERMISSION_DENIED  AMBIGUOUS_TENANT             an operator's certificate naming two
// grpc.health.v1 and server reflection are open to every caller: they show readiness and
// the services' shape, nothing of any tenant's.
#ifndef EONCE_SERVICES_INBOX_CALLER_GATE_H_
#define EONCE_SERVICES_INBOX_CALLER_GATE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/rpc/tls.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_context.h"

namespace eonce {

struct BusinessCaller {
  enum class Kind { kComponent, kOperator };
  Kind kind = Kind::kComponent;
  std::string name;  // the component's or the operator's
  // Whom the call acts for: what a component states (empty: it names no tenant), an
  // operator's own tenant.
  std::string tenant;
};

// What a call presents.
struct CallerClaims {
  // Over mutual TLS: the client certificate's URI SANs, and the headers below other than
  // `tenant` are not looked at.
  bool authenticated = false;
  std::vector<std::string> certificate_uris;
  // The headers: eonce-component, eonce-operator, eonce-workload, eonce-tenant.
  std::string component;
  std::string operator_name;
  std::string workload;
  std::string tenant;
  // The method called ("/package.Service/Method"); empty where it is not known (a
  // handler's look-up of a call the gate already let in).
  std::string method;
};

// The one decision.
absl::StatusOr<BusinessCaller> DecideBusinessCaller(const CallerClaims& claims);

// True for a method an operator may call on a business port: its tenant's effects and
// outcomes, read. Operators read; components act: every other method there changes the
// business or reads data not filed by tenant (SlotData, Forwards, FollowUps, the business's
// own methods), so an operator of one tenant could reach another's through it.
bool OperatorMayCall(absl::string_view method);

// True for a method every caller may call (grpc.health.v1, server reflection).
bool OpenToEveryCaller(absl::string_view method);

// The credentials of a business port: mutual TLS from `tls` (or plaintext when it is not
// enabled) with the gate run on every call.
std::shared_ptr<grpc::ServerCredentials> BusinessServerCredentials(const TlsFiles& tls);

// The caller of a call that came through the gate: whom a handler acts for.
absl::StatusOr<BusinessCaller> BusinessCallerOf(const grpc::ServerContextBase& context);

}  // namespace eonce

#endif  // EONCE_SERVICES_INBOX_CALLER_GATE_H_
