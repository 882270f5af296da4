// DeduperOptions: how the Deduper is configured (leases, call timeouts, what a revoked
// credential may still hear, whether an inbox-keeping business is the commit point), and
// the check that the lease covers the work done under it (deduper_admin.cc). Plain data;
// copied into the Deduper at construction.
#ifndef EONCE_DEDUPE_SIDECAR_CORE_DEDUPER_OPTIONS_H_
#define EONCE_DEDUPE_SIDECAR_CORE_DEDUPER_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "common/command/command.h"

namespace eonce {

struct DeduperOptions {
  // Time a lease keeps beyond the calls it covers: queueing on gRPC's threads and the
  // fsyncs before and after them.
  static constexpr int64_t kLeaseSlackMs = 500;
  // How long a started record blocks duplicates. It covers the longest work done under
  // one lease, a recovery: an outcome query, then a forward, plus kLeaseSlackMs (checked
  // by ValidateDeduperOptions). Every call is also cut off before its lease ends, so a
  // lease only runs out once its work is over (or the sidecar died).
  int64_t lease_ms = 10'000;
  // The longest a forward may take, whatever the caller's deadline.
  int64_t forward_timeout_ms = 5'000;
  int64_t outcome_query_timeout_ms = 2'000;
  // Whether a duplicate of a command finished before its credential was revoked gets
  // the stored answer (true) or a denial (false, the default). A duplicate is the same
  // command id and payload as the key's record; any other command under the key is
  // denied either way.
  bool replay_after_revocation = false;
  // For a method whose business says its inbox keeps the outcome (InboxMethods), the
  // business's write is the commit point and the sidecar skips its own fsyncs on the
  // path (docs/design.md). False: the sidecar syncs as for a legacy business, whatever
  // the business says.
  bool business_commit_point = true;
  // Names this sidecar as the lease owner.
  std::string instance_id = "sidecar";
  CommandLimits limits;
};

// INVALID_ARGUMENT naming the flag to change when the lease does not cover its work.
absl::Status ValidateDeduperOptions(const DeduperOptions& options);

}  // namespace eonce

#endif  // EONCE_DEDUPE_SIDECAR_CORE_DEDUPER_OPTIONS_H_
