// Policy: which workload may act for which actor, who may run which operation, and which
// credentials are revoked.
//
// Two identities make every call. The workload (an agent, a service) is proven by its
// client certificate (spiffe://<domain>/tenant/<t>/workload/<w>). The actor (the person
// or service on whose behalf the command was issued) is stated by the workload; a
// workload that states none acts as itself.
//
// The policy file is plain text, one rule a line, `#` starts a comment:
//
//   act      <tenant> <workload|*> <actor|*>    the workload may state the actor
//   allow    <tenant> <actor|*> <method|*>      the actor may run the method
//   revoke   <tenant> <name|*> [below_epoch=N]  an actor's or a workload's credentials are
//                                               revoked (all, or those whose certificate
//                                               carries an epoch below N)
//   operator <tenant> <name|*>                  may use SidecarAdmin (parked outcomes, the
//                                               audit log, the business's effects and
//                                               outcomes) and Reconcile any key, for the
//                                               tenant
//   platform <tenant> <name>                    an operator of that tenant who may change
//                                               the slot map (AdoptSlotMap): it moves every
//                                               tenant's slots, so no tenant operator may
//   readonly <method>                           changes nothing: a transparent-mode call
//                                               to it may come without an idempotency key
//   mutating <method>                           deprecated, accepted and ignored: every
//                                               method not listed readonly is mutating
//
// A call is allowed when the workload may act for its actor (an act rule, or the actor is
// the workload itself), an allow rule matches the actor and the method, and no revoke rule
// matches the actor or the workload. Every call the sidecar forwards is checked, keyed or
// not, duplicates included, so idempotency never works around a revocation. The sidecar
// fails closed: a call without an idempotency key is forwarded only to a method listed
// readonly, so with no policy file (where every keyed call is allowed and every workload
// may act for every actor, a development default the sidecar logs at startup) every
// unkeyed call is refused.
//
// PolicyStore reloads the file when its modification time or size changes; a file that
// does not parse keeps the previous policy and the error is reported. Thread-safe.
#ifndef EONCE_DEDUPE_SIDECAR_AUTHZ_POLICY_H_
#define EONCE_DEDUPE_SIDECAR_AUTHZ_POLICY_H_

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
  // "ACTOR_NOT_PERMITTED", "POLICY_DENIED" or "CREDENTIAL_REVOKED" when not allowed.
  std::string reason;
};

// The actor a call is made for: the one the workload states, else the workload itself.
inline const std::string& EffectiveActor(const std::string& workload,
                                         const std::string& stated_actor) {
  return stated_actor.empty() ? workload : stated_actor;
}

class Policy {
 public:
  // A policy that allows everything.
  static Policy AllowAll();
  // INVALID_ARGUMENT naming the line for a malformed file.
  static absl::StatusOr<Policy> Parse(const std::string& text);

  // `actor` is the effective actor (EffectiveActor); `credential_epoch` the one the
  // workload's certificate carries (what it states, in development mode).
  PolicyDecision Check(const std::string& tenant, const std::string& workload,
                       const std::string& actor, const std::string& method,
                       int64_t credential_epoch) const;
  // Check without the method: no revocation matches and the workload may act for the
  // actor (a lookup that names no method: a Reconcile of a key nothing holds).
  PolicyDecision CheckActing(const std::string& tenant, const std::string& workload,
                             const std::string& actor, int64_t credential_epoch) const;
  // Check with revocations left aside: the act and allow rules alone. A replay after a
  // revocation is handed out only where they would still let the call through.
  PolicyDecision CheckGrants(const std::string& tenant, const std::string& workload,
                             const std::string& actor, const std::string& method) const;
  // Listed `readonly`: safe to forward without an idempotency key.
  bool IsReadOnly(const std::string& method) const;
  // Whether `name` (a proven operator identity) may operate for `tenant`. Without a
  // policy file any named operator may (development).
  bool IsOperator(const std::string& tenant, const std::string& name) const;
  // Whether `name`, a proven operator of `tenant`, may change the slot map. Without a
  // policy file any named operator may (development).
  bool IsPlatformOperator(const std::string& tenant, const std::string& name) const;

 private:
  // A revoke rule matching the actor or the workload at this epoch.
  PolicyDecision CheckRevoked(const std::string& tenant, const std::string& workload,
                              const std::string& actor, int64_t credential_epoch) const;
  // The workload may state the actor (an act rule, or it acts as itself).
  PolicyDecision CheckAct(const std::string& tenant, const std::string& workload,
                          const std::string& actor) const;
  struct Act {
    std::string tenant, workload, actor;
  };
  struct Allow {
    std::string tenant, actor, method;
  };
  struct Revoke {
    std::string tenant, actor;
    int64_t below_epoch = 0;  // 0: every epoch
  };
  bool allow_all_ = false;
  std::vector<Act> acts_;
  std::vector<Allow> allows_;
  std::vector<Revoke> revokes_;
  absl::flat_hash_set<std::string> read_only_;
  std::vector<std::pair<std::string, std::string>> operators_;  // (tenant, name or *)
  std::vector<std::pair<std::string, std::string>> platform_;   // (tenant, name)
};

class PolicyStore {
 public:
  // An empty path: allow everything, never reload.
  static absl::StatusOr<std::unique_ptr<PolicyStore>> Open(const std::string& path);

  PolicyDecision Check(const std::string& tenant, const std::string& workload,
                       const std::string& actor, const std::string& method,
                       int64_t credential_epoch);
  PolicyDecision CheckActing(const std::string& tenant, const std::string& workload,
                             const std::string& actor, int64_t credential_epoch);
  PolicyDecision CheckGrants(const std::string& tenant, const std::string& workload,
                             const std::string& actor, const std::string& method);
  bool IsReadOnly(const std::string& method);
  bool IsOperator(const std::string& tenant, const std::string& name);
  bool IsPlatformOperator(const std::string& tenant, const std::string& name);

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

#endif  // EONCE_DEDUPE_SIDECAR_AUTHZ_POLICY_H_
