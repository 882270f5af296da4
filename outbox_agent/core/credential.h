// CredentialState: the session replay runs under, and whether replay may run at all.
//
// The epoch only moves forward. A revocation, or an UNAUTHENTICATED answer, stops replay
// at once; answers that arrive after that are not applied (their fence no longer fits).
// Renewal (a higher epoch) resumes it. The state is persisted, so a revocation survives a
// restart. Thread-safe.
#ifndef EONCE_OUTBOX_AGENT_CORE_CREDENTIAL_H_
#define EONCE_OUTBOX_AGENT_CORE_CREDENTIAL_H_

#include <string>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "outbox_agent/store/outbox_store.h"
#include "outbox_agent/core/sidecar_client.h"

namespace eonce {

class CredentialState {
 public:
  // Loads the persisted epoch and revocation; `initial_epoch` applies on first start.
  static absl::StatusOr<std::unique_ptr<CredentialState>> Load(OutboxStore& store,
                                                              std::string tenant,
                                                              std::string actor,
                                                              int64_t initial_epoch);

  Session session() const;
  // True when replay may run: not revoked and not paused by UNAUTHENTICATED.
  bool active() const;
  bool revoked() const;
  bool paused() const;
  // Whether an answer given to `sent_under` may still be applied.
  bool Fits(const Session& sent_under, const v1::Fence& fence) const;
  // Whether `sent_under` is still the credential replay runs under (its epoch).
  bool Current(const Session& sent_under) const;

  // INVALID_ARGUMENT if `epoch` goes backwards. A higher epoch clears a pause.
  absl::Status Set(int64_t epoch, bool revoked);
  void PauseUntilRenewed();

  // Reads "epoch=N" and "revoked=true|false" lines from `path` if it changed. The file
  // states the whole credential: without a revoked line it is not revoked.
  absl::Status MaybeReloadFile(const std::string& path);

 private:
  CredentialState(OutboxStore& store, std::string tenant, std::string actor)
      : store_(store), tenant_(std::move(tenant)), actor_(std::move(actor)) {}

  OutboxStore& store_;
  const std::string tenant_;
  const std::string actor_;
  mutable absl::Mutex mu_;
  int64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  bool revoked_ ABSL_GUARDED_BY(mu_) = false;
  bool paused_ ABSL_GUARDED_BY(mu_) = false;
  int64_t file_mtime_ns_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace eonce

#endif  // EONCE_OUTBOX_AGENT_CORE_CREDENTIAL_H_
