// FollowUpRelay: the second half of a business's transactional outbox. A business built
// on services/inbox writes follow-up commands in the same batch as the effect that emits
// them (a ledger's credit to an account another shard holds); the relay, running beside
// it (outbox_agent --relay_from), takes each one into this agent's own durable outbox,
// then acknowledges it there. From then on it is a command like any other: sent at least
// once to its entity's owner, deduplicated by the sidecar and the receiving inbox.
//
// A crash between the enqueue and the acknowledgement pulls the same follow-ups again;
// Enqueue answers a known command id with its record, so the second round adds nothing.
#ifndef EONCE_OUTBOX_AGENT_DOORS_RELAY_H_
#define EONCE_OUTBOX_AGENT_DOORS_RELAY_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/base/clock.h"
#include "common/rpc/tls.h"
#include "eonce/v1/outcome.pb.h"
#include "outbox_agent/core/outbox.h"

namespace eonce {

// A business's outbox (eonce.v1.FollowUps), for one tenant.
class FollowUpSource {
 public:
  virtual ~FollowUpSource() = default;
  virtual absl::StatusOr<v1::PullFollowUpsResponse> Pull(int limit) = 0;
  virtual absl::Status Ack(const std::vector<std::string>& ids) = 0;
};

// The FollowUps service at `address`, called for `tenant`, each call bounded by
// `timeout_ms`.
std::unique_ptr<FollowUpSource> NewGrpcFollowUpSource(const std::string& address,
                                                      const std::string& tenant,
                                                      const TlsFiles& tls, Clock& clock,
                                                      int64_t timeout_ms = 5'000);

class FollowUpRelay {
 public:
  static constexpr int kPageSize = 100;

  FollowUpRelay(FollowUpSource& source, Outbox& outbox) : source_(source), outbox_(outbox) {}

  // One round: pulls a page, enqueues each follow-up (durably), acknowledges the ones
  // enqueued. Returns how many it took; an error leaves the rest for the next round.
  absl::StatusOr<int> RelayOnce();

  int64_t relayed() const { return relayed_.load(); }

 private:
  FollowUpSource& source_;
  Outbox& outbox_;
  std::atomic<int64_t> relayed_{0};
};

}  // namespace eonce

#endif  // EONCE_OUTBOX_AGENT_DOORS_RELAY_H_
