// Policy: who may run which operation, and which credentials are revoked.
//
// The policy file is plain text, one rule a line, `#` starts a comment:
//
//   allow    <tenant> <actor|*> <method|*>      may run the method
//   revoke   <tenant> <actor|*> [below_epoch=N] credentials are revoked (all, or those
//                                               issued under an epoch below N)
//   operator <tenant> <name|*>                  may use SidecarAdmin (parked outcomes, the
//                                               audit log) and the effect and outcome
//                                               calls through the sidecar, for the tenant
//   readonly <method>                           changes nothing: a transparent-mode call
//                                               to it may come without an idempotency key
//   mutating <method>                           deprecated, accepted and ignored: every
//                                               method not listed readonly is mutating
//
// A call is allowed when an allow rule matches it and no revoke rule does. Every call
// the sidecar forwards is checked, keyed or not, duplicates included, so idempotency
// never works around a revocation. The sidecar fails closed: a call without an
// idempotency key is forwarded only to a method listed readonly, so with no policy file
// (where every keyed call is allowed, a development default the sidecar logs at
// startup) every unkeyed call is refused.
//
// PolicyStore reloads the file when its modification time or size changes; a file that
// does not parse keeps the previous policy and the error is reported. Thread-safe.
#ifndef EONCE_DEDUPE_SIDECAR_POLICY_H_
#define EONCE_DEDUPE_SIDECAR_POLICY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace eonce {

struct PolicyDecision {
  bool allowed = true;
  // "POLICY_DENIED" or "CREDENTIAL_REVOKED" when not allowed.
  std::string reason;
};

class Policy {
 public:
  // A policy that allows everything.
  static Policy AllowAll();
  // INVALID_ARGUMENT naming the line for a malformed file.
  static absl::StatusOr<Policy> Parse(const std::string& text);

  PolicyDecision Check(const std::string& tenant, const std::string& actor,
                       const std::string& method, int64_t credential_epoch) const;
  // Listed `readonly`: safe to forward without an idempotency key.
  bool IsReadOnly(const std::string& method) const;
  // Whether `name` (a proven operator identity) may operate for `tenant`. Without a
  // policy file any named operator may (development).
  bool IsOperator(const std::string& tenant, const std::string& name) const;

 private:
  struct Allow {
    std::string tenant, actor, method;
  };
  struct Revoke {
    std::string tenant, actor;
    int64_t below_epoch = 0;  // 0: every epoch
  };
  bool allow_all_ = false;
  std::vector<Allow> allows_;
  std::vector<Revoke> revokes_;
  absl::flat_hash_set<std::string> read_only_;
  std::vector<std::pair<std::string, std::string>> operators_;  // (tenant, name or *)
};

class PolicyStore {
 public:
  // An empty path: allow everything, never reload.
  static absl::StatusOr<std::unique_ptr<PolicyStore>> Open(const std::string& path);

  PolicyDecision Check(const std::string& tenant, const std::string& actor,
                       const std::string& method, int64_t credential_epoch);
  bool IsReadOnly(const std::string& method);
  bool IsOperator(const std::string& tenant, const std::string& name);

  // Reloads if the file changed. Returns the parse error of a bad new file (the old
  // policy stays); OK when nothing changed or the reload worked.
  absl::Status MaybeReload();
  // Replaces the policy directly (tests, the simulation).
  void Set(Policy policy);
  int64_t reloads() const;

 private:
  PolicyStore(std::string path, Policy policy);

  const std::string path_;
  mutable absl::Mutex mu_;
  // Read with std::atomic_load on every check, so checks take no lock.
  std::shared_ptr<const Policy> policy_;
  int64_t mtime_ns_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t size_ ABSL_GUARDED_BY(mu_) = -1;
  int64_t reloads_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace eonce

#endif  // EONCE_DEDUPE_SIDECAR_POLICY_H_
