// The authorization matrix: who may call which method at which door, in one table.
//
// A door is a kind of listening port:
//   agent         the outbox agent (eonce.v1.Agent), which serves one tenant;
//   sidecar       the dedupe sidecar's own services (eonce.v1.Sidecar, SidecarAdmin), the
//                 sidecar's binary and the one embedded in a ledger alike;
//   pass-through  the business's methods reached through a sidecar (transparent mode);
//   business      a business service's own port (services/inbox ServiceHost): the
//                 ledger's, and the socket of a ledger with its sidecar in process.
// The callers (columns) are the ones that must not get what they are not entitled to:
//   no identity   plaintext: no eonce-* header; mutual TLS: a certificate that names no
//                 tenant and no eonce component;
//   other tenant  globex, with every right in its own tenant (a workload and an operator
//                 there), naming the victim acme's resources: its command ids, accounts,
//                 outbox records, slots;
//   workload      acme's plain workload, where an operator, a platform operator or an
//                 eonce component is needed;
//   revoked       acme's workload whose credential the policy revokes: by name (`revoke`)
//                 and, in a second call, by an epoch below `below_epoch`;
//   claims tenant (mutual TLS only) globex's certificate with an eonce-tenant: acme header;
//   claims role   (mutual TLS only) acme's plain workload certificate with eonce-operator
//                 and eonce-component headers.
// Each cell says what that caller gets:
//   Ok()          the call succeeds (public by design, or the caller is entitled);
//   Past()        the call gets past every identity check (any answer but
//                 PERMISSION_DENIED or UNAUTHENTICATED): the caller is entitled, and what
//                 the business answers is its business;
//   No(refusal)   refused with this code and reason; Either(a, b) when two checks may come
//                 in either order and each refusal is right;
//   Anon()        the refusal of a caller without identity: UNAUTHENTICATED NO_IDENTITY in
//                 plaintext; under mutual TLS PERMISSION_DENIED, NO_TENANT_IN_CERTIFICATE at
//                 a tenant's door and BUSINESS_CALLER_NOT_ALLOWED at a business port.
// For every call by another tenant (allowed or not), and every refused call, the victim's
// observable state must be the same after the call as before, and an answer the other
// tenant gets must not name the victim.
//
// Gap(cell, why) marks a rule that is written down but that no change in progress builds:
// the cell is checked and printed as a known gap while it does not hold, and fails the
// test once it holds (so the marker is taken away and the rule then guards).
//
// A method that a server registers and that has no row here fails the test: decide who
// may call it and add the row.
#ifndef EONCE_TESTS_SECURITY_AUTHZ_MATRIX_ROWS_H_
#define EONCE_TESTS_SECURITY_AUTHZ_MATRIX_ROWS_H_

#include <array>

#include "grpcpp/support/status.h"

namespace eonce::authz {

enum Column { kNoIdentity, kOtherTenant, kWorkload, kRevoked, kClaimsTenant, kClaimsRole, kColumns };

inline constexpr const char* kColumnNames[kColumns] = {
    "no identity", "other tenant", "workload", "revoked", "claims tenant", "claims role"};

struct Refusal {
  grpc::StatusCode code = grpc::StatusCode::OK;
  const char* reason = nullptr;  // null: any reason (the rule's reason is not named yet)
};

// Where a gap is: in both modes, or only where identities come from headers.
enum class GapIn { kNowhere, kBothModes, kPlaintext };

struct Expect {
  enum Kind { kOk, kPast, kRefused, kUnidentified };
  Kind kind = kOk;
  Refusal refusal;
  // A second refusal that is as right (two checks whose order is not fixed).
  bool has_also = false;
  Refusal also;
  GapIn gap_in = GapIn::kNowhere;
  const char* gap = nullptr;
};

constexpr grpc::StatusCode kDenied = grpc::StatusCode::PERMISSION_DENIED;

constexpr Refusal kWrongTenant{kDenied, "WRONG_TENANT"};
constexpr Refusal kTenantMismatch{kDenied, "TENANT_MISMATCH"};
constexpr Refusal kCredentialRevoked{kDenied, "CREDENTIAL_REVOKED"};
constexpr Refusal kOperatorRequired{kDenied, "OPERATOR_REQUIRED"};
constexpr Refusal kPlatformOperatorRequired{kDenied, "PLATFORM_OPERATOR_REQUIRED"};
constexpr Refusal kReservedMethod{kDenied, "RESERVED_METHOD"};
constexpr Refusal kBusinessCallerNotAllowed{kDenied, "BUSINESS_CALLER_NOT_ALLOWED"};
// Only an eonce component may call it: an operator reads effects and outcomes only.
constexpr Refusal kComponentRequired{kDenied, "COMPONENT_REQUIRED"};

constexpr Expect Ok() { return Expect{Expect::kOk}; }
constexpr Expect Past() { return Expect{Expect::kPast}; }
constexpr Expect No(Refusal refusal) { return Expect{Expect::kRefused, refusal}; }
constexpr Expect Either(Refusal a, Refusal b) { return Expect{Expect::kRefused, a, true, b}; }
constexpr Expect Anon() { return Expect{Expect::kUnidentified}; }
constexpr Expect AnonOr(Refusal also) { return Expect{Expect::kUnidentified, {}, true, also}; }
constexpr Expect Gap(Expect cell, GapIn where, const char* why) {
  cell.gap_in = where;
  cell.gap = why;
  return cell;
}

using Cells = std::array<Expect, kColumns>;

// --- The rules, one pattern per kind of call (columns as in Column). ---

// Health and reflection: public by design (probes; the method names, no data).
constexpr Cells kPublic = {Ok(), Ok(), Ok(), Ok(), Ok(), Ok()};

constexpr char kAgentHeaderGap[] =
    "the agent takes a plaintext caller without eonce-tenant as its own tenant; every "
    "plaintext client (outbox_agent/client, outboxctl, the examples) must first state it";
constexpr char kAgentRevocationGap[] =
    "the agent holds no policy: a revoked producer still enqueues, and the agent submits "
    "under its own credential, so the sidecar sees no revoked name unless it is the actor";

// The agent's calls for its tenant's workloads: enqueue, and read the tenant's outbox.
constexpr Cells kAgentTenantCall = {
    Gap(Anon(), GapIn::kPlaintext, kAgentHeaderGap), No(kWrongTenant), Past(),
    Gap(No(kCredentialRevoked), GapIn::kBothModes, kAgentRevocationGap), No(kTenantMismatch),
    Past()};
// The agent's operator calls: they change what is replayed, or stop all replay. Without
// identity either check may refuse first.
constexpr Cells kAgentOperatorCall = {AnonOr(kOperatorRequired), No(kWrongTenant),
                                      No(kOperatorRequired),     No(kOperatorRequired),
                                      No(kTenantMismatch),       No(kOperatorRequired)};

// A tenant's own call, checked by the policy (act, allow, revoke); another tenant's call
// lands in that tenant's own scope and finds nothing of the victim's.
constexpr Cells kTenantCall = {Anon(), Past(), Past(), No(kCredentialRevoked), No(kTenantMismatch),
                               Past()};
constexpr char kInfoGap[] =
    "GetInfo and GetSlotMap read no identity; the agent, sidecarctl, the reshard tool and "
    "the demo ask them with none (in plaintext): they must state one first";
// Readable by any identified caller (settings and topology, no tenant's data).
constexpr Cells kIdentifiedRead = {Gap(Anon(), GapIn::kBothModes, kInfoGap),
                                   Past(),
                                   Past(),
                                   Past(),
                                   Gap(No(kTenantMismatch), GapIn::kBothModes, kInfoGap),
                                   Past()};
// An operator of the tenant: parked outcomes and the audit log, of its own tenant only.
constexpr Cells kOperatorCall = {Anon(),
                                 Past(),
                                 No(kOperatorRequired),
                                 No(kOperatorRequired),
                                 No(kTenantMismatch),
                                 No(kOperatorRequired)};
// A platform operator: the slot map moves every tenant's commands.
constexpr Cells kPlatformCall = {Anon(),
                                 No(kPlatformOperatorRequired),
                                 No(kPlatformOperatorRequired),
                                 No(kPlatformOperatorRequired),
                                 No(kTenantMismatch),
                                 No(kPlatformOperatorRequired)};
// eonce's own services behind a sidecar: never forwarded, whoever asks.
constexpr Cells kReserved = {AnonOr(kReservedMethod),
                             No(kReservedMethod),
                             No(kReservedMethod),
                             Either(kReservedMethod, kCredentialRevoked),
                             Either(kReservedMethod, kTenantMismatch),
                             No(kReservedMethod)};
// A business port's reads filed by tenant (effects, outcomes): an eonce component, or an
// operator reading its own tenant's.
constexpr Cells kBusinessCall = {Anon(),
                                 Past(),
                                 No(kBusinessCallerNotAllowed),
                                 No(kBusinessCallerNotAllowed),
                                 No(kTenantMismatch),
                                 No(kBusinessCallerNotAllowed)};
// Every other call on a business port (the business's own methods, a relay's follow-ups, a
// slot's rows of every tenant, a forward that names its own tenant): an eonce component
// only, not even an operator, who could reach another tenant's data through them.
constexpr Cells kComponentCall = {Anon(),
                                  No(kComponentRequired),
                                  No(kBusinessCallerNotAllowed),
                                  No(kBusinessCallerNotAllowed),
                                  Either(kTenantMismatch, kComponentRequired),
                                  No(kBusinessCallerNotAllowed)};

struct Row {
  const char* door;
  const char* method;
  Cells cells;
  const char* why;
};

// clang-format off
inline const Row kMatrix[] = {
    // The outbox agent (serves one tenant).
    {"agent", "/eonce.v1.Agent/Enqueue", kAgentTenantCall, "a workload of the agent's tenant stores a command"},
    {"agent", "/eonce.v1.Agent/EnqueueBatch", kAgentTenantCall, "as Enqueue, for each command"},
    {"agent", "/eonce.v1.Agent/Get", kAgentTenantCall, "the tenant's own outbox"},
    {"agent", "/eonce.v1.Agent/List", kAgentTenantCall, "the tenant's own outbox"},
    {"agent", "/eonce.v1.Agent/Watch", kAgentTenantCall, "the tenant's own outbox"},
    {"agent", "/eonce.v1.Agent/Stats", kAgentTenantCall, "counts of the tenant's own outbox"},
    {"agent", "/eonce.v1.Agent/Requeue", kAgentOperatorCall, "sends a dead-lettered command again"},
    {"agent", "/eonce.v1.Agent/Drop", kAgentOperatorCall, "gives a command up for good"},
    {"agent", "/eonce.v1.Agent/SetCredential", kAgentOperatorCall, "stops or resumes all replay"},
    {"agent", "/grpc.health.v1.Health/Check", kPublic, "probes"},
    {"agent", "/grpc.health.v1.Health/Watch", kPublic, "probes"},
    {"agent", "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", kPublic, "method names only"},

    // The sidecar's own services.
    {"sidecar", "/eonce.v1.Sidecar/Submit", kTenantCall, "a command, under the policy"},
    {"sidecar", "/eonce.v1.Sidecar/SubmitBatch", kTenantCall, "as Submit, for each command"},
    {"sidecar", "/eonce.v1.Sidecar/Reconcile", kTenantCall, "a command's record, under the policy as Submit; another tenant's id is not seen"},
    {"sidecar", "/eonce.v1.Sidecar/GetInfo", kIdentifiedRead, "retention and limits"},
    {"sidecar", "/eonce.v1.Sidecar/GetSlotMap", kIdentifiedRead, "which shard takes which slot"},
    {"sidecar", "/eonce.v1.SidecarAdmin/ListParked", kOperatorCall, "the tenant's parked outcomes"},
    {"sidecar", "/eonce.v1.SidecarAdmin/QueryAudit", kOperatorCall, "the tenant's audit events"},
    {"sidecar", "/eonce.v1.SidecarAdmin/ListEffects", kOperatorCall, "the tenant's effects at the business, read through the sidecar"},
    {"sidecar", "/eonce.v1.SidecarAdmin/QueryOutcome", kOperatorCall, "a command's outcome at the business, for the tenant"},
    {"sidecar", "/eonce.v1.SidecarAdmin/VerifyAudit", kPlatformCall, "whether the audit chain, every tenant's, holds and how long it is"},
    {"sidecar", "/eonce.v1.SidecarAdmin/ResolveParked", kOperatorCall, "settles a parked outcome of the tenant"},
    {"sidecar", "/eonce.v1.SidecarAdmin/AdoptSlotMap", kPlatformCall, "moves every tenant's slots"},
    {"sidecar", "/eonce.v1.SidecarAdmin/ExportSlots", kPlatformCall, "every tenant's records of a slot"},
    {"sidecar", "/eonce.v1.SidecarAdmin/ImportSlots", kPlatformCall, "every tenant's records of a slot"},
    {"sidecar", "/eonce.v1.SidecarAdmin/DropSlots", kPlatformCall, "every tenant's records of a slot"},
    {"sidecar", "/grpc.health.v1.Health/Check", kPublic, "probes"},
    {"sidecar", "/grpc.health.v1.Health/Watch", kPublic, "probes"},
    {"sidecar", "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", kPublic, "method names only"},

    // The business's methods through a sidecar.
    {"pass-through", "/eonce.ledger.v1.Ledger/OpenAccount", kTenantCall, "the business's own method, under the policy"},
    {"pass-through", "/eonce.ledger.v1.Ledger/Transfer", kTenantCall, "the business's own method, under the policy"},
    {"pass-through", "/eonce.ledger.v1.Ledger/Credit", kTenantCall, "the business's own method, under the policy"},
    {"pass-through", "/eonce.ledger.v1.Ledger/GetAccount", kTenantCall, "a read is checked as a command is"},
    {"pass-through", "/eonce.ledger.v1.Ledger/GetTotal", kTenantCall, "a read is checked as a command is (the ledger's total is every tenant's: a policy for several tenants leaves it out)"},
    {"pass-through", "/eonce.v1.Outcome/QueryOutcome", kReserved, "eonce's own: the sidecar asks it"},
    {"pass-through", "/eonce.v1.Effects/ListEffects", kReserved, "eonce's own: operators read it at the business port"},
    {"pass-through", "/eonce.v1.FollowUps/PullFollowUps", kReserved, "eonce's own: the relay's"},
    {"pass-through", "/eonce.v1.FollowUps/AckFollowUps", kReserved, "eonce's own: the relay's (an ack drops credits in flight)"},
    {"pass-through", "/eonce.v1.SlotData/ExportSlotData", kReserved, "eonce's own: every tenant's rows of a slot"},
    {"pass-through", "/eonce.v1.SlotData/ImportSlotData", kReserved, "eonce's own: every tenant's rows of a slot"},
    {"pass-through", "/eonce.v1.SlotData/DropSlotData", kReserved, "eonce's own: every tenant's rows of a slot"},
    {"pass-through", "/eonce.v1.SlotData/HoldSlotData", kReserved, "eonce's own: every tenant's rows of a slot"},
    {"pass-through", "/eonce.v1.Forwards/ForwardBatch", kReserved, "eonce's own: each forward names its tenant"},

    // A business port.
    {"business", "/eonce.ledger.v1.Ledger/OpenAccount", kComponentCall, "tenants and operators go through the sidecar"},
    {"business", "/eonce.ledger.v1.Ledger/Transfer", kComponentCall, "tenants and operators go through the sidecar"},
    {"business", "/eonce.ledger.v1.Ledger/Credit", kComponentCall, "tenants and operators go through the sidecar"},
    {"business", "/eonce.ledger.v1.Ledger/GetAccount", kComponentCall, "tenants and operators go through the sidecar"},
    {"business", "/eonce.ledger.v1.Ledger/GetTotal", kComponentCall, "tenants and operators go through the sidecar"},
    {"business", "/eonce.v1.Outcome/QueryOutcome", kBusinessCall, "the sidecar's, scoped by tenant"},
    {"business", "/eonce.v1.Effects/ListEffects", kBusinessCall, "operators' audit of the effects, scoped by tenant"},
    {"business", "/eonce.v1.FollowUps/PullFollowUps", kComponentCall, "the relay's"},
    {"business", "/eonce.v1.FollowUps/AckFollowUps", kComponentCall, "the relay's (an ack drops credits in flight)"},
    {"business", "/eonce.v1.SlotData/ExportSlotData", kComponentCall, "a slot's rows of every tenant"},
    {"business", "/eonce.v1.SlotData/ImportSlotData", kComponentCall, "a slot's rows of every tenant"},
    {"business", "/eonce.v1.SlotData/DropSlotData", kComponentCall, "a slot's rows of every tenant"},
    {"business", "/eonce.v1.SlotData/HoldSlotData", kComponentCall, "a slot's rows of every tenant"},
    {"business", "/eonce.v1.Forwards/ForwardBatch", kComponentCall, "each forward names its own tenant"},
    {"business", "/grpc.health.v1.Health/Check", kPublic, "probes"},
    {"business", "/grpc.health.v1.Health/Watch", kPublic, "probes"},
    {"business", "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", kPublic, "method names only; the sidecar learns the business's methods by it"},
};
// clang-format on

}  // namespace eonce::authz

#endif  // EONCE_TESTS_SECURITY_AUTHZ_MATRIX_ROWS_H_
