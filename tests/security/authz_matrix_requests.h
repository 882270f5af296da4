// The victim the authorization matrix attacks (authz_matrix_test.cc), and what each
// method is sent: tenant acme's accounts, commands and outbox records, named in every
// request that can name them; and the policy the sidecars run.
#ifndef EONCE_TESTS_SECURITY_AUTHZ_MATRIX_REQUESTS_H_
#define EONCE_TESTS_SECURITY_AUTHZ_MATRIX_REQUESTS_H_

#include <set>
#include <string>

#include "common/command/command.h"
#include "eonce/v1/command.pb.h"

namespace eonce::authz {

inline constexpr char kVictim[] = "acme";
inline constexpr char kOther[] = "globex";

// What the attacks name: the victim's accounts, its commands and its outbox records.
inline constexpr char kAccount[] = "alice";
inline constexpr char kSecondAccount[] = "bob";
inline constexpr char kSubmitted[] = "open-alice";
inline constexpr char kSecondSubmitted[] = "open-bob";
inline constexpr char kOutboxAcked[] = "outbox-1";
inline constexpr char kOutboxQueued[] = "outbox-2";

// The methods the policy lists `readonly`: calls through the pass-through without an
// idempotency key go on to these only, so the matrix sends them without one and every
// other method with one.
const std::set<std::string>& ReadOnly();

// The most a tenant can be given (allow * for acme and globex), so that what is refused
// is refused by the sidecar's own rules; acme's mallory is revoked by name, its laptop
// below epoch 3; oncall is an operator of each tenant.
std::string PolicyText();

// spiffe://eonce.test/<path>, and the workload and operator ids under a tenant.
std::string SpiffeId(const std::string& path);
std::string WorkloadId(const std::string& tenant, const std::string& name);
std::string OperatorId(const std::string& tenant, const std::string& name);

// A command that opens `account`, as a producer gives it to the agent (the agent adds the
// key and the hash), and complete, as the sidecar takes it.
v1::Command ProducerCommand(const std::string& command_id, const std::string& account);
v1::Command SidecarCommand(const std::string& command_id, const std::string& account);

// The idempotency key of a keyed call through the pass-through.
std::string AttackKey(const std::string& method);

// The serialized request `method` gets in the matrix's call number `call`.
std::string RequestFor(const std::string& method, int call);

}  // namespace eonce::authz

#endif  // EONCE_TESTS_SECURITY_AUTHZ_MATRIX_REQUESTS_H_
