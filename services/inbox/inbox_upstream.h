// InboxUpstream: the sidecar's Upstream for a business in the sidecar's own process — a
// C++ service built on services/inbox, whose handlers the sidecar calls directly instead
// of over a second gRPC hop (one hop per command instead of two).
//
// Everything else is as over gRPC: the sidecar writes its records and checks the policy,
// the handler runs the business's mutation through Inbox::Run, and the answer goes back
// once the business's write is durable (Inbox::WhenDurable: the inbox is the commit
// point, as its `eonce-inbox: kept` trailer says over gRPC). A unary Submit's forward
// (ForwardCall::alone) may sync a quiet store on its own thread, as a unary mutation over
// gRPC does (RunMutation). A key the inbox refuses is a conflict; QueryOutcome is the
// inbox's. A crash takes the sidecar and the business down together, and recovery is the
// same as for two processes: the business's inbox holds what was applied. A forward whose
// deadline (ForwardCall::deadline_ms, on the sidecar's clock) has passed before it starts
// is refused with nothing applied, as gRPC refuses a call past its deadline.
#ifndef EONCE_SERVICES_INBOX_INBOX_UPSTREAM_H_
#define EONCE_SERVICES_INBOX_INBOX_UPSTREAM_H_

#include <functional>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "common/base/clock.h"
#include "dedupe_sidecar/upstream/upstream.h"
#include "services/inbox/inbox.h"

namespace eonce {

class InboxUpstream : public Upstream {
 public:
  // A business method: the mutation for the caller `identity` names, from the serialized
  // request, run through Inbox::Run with identity.durability_by_caller set (the upstream
  // waits for durability before it answers, on no thread but a quiet store's caller).
  using Handler = std::function<absl::StatusOr<v1::CallResult>(const CallIdentity& identity,
                                                               const std::string& request)>;

  // `handlers` by full method name ("/eonce.ledger.v1.Ledger/Transfer"). `clock`: the one
  // the sidecar's deadlines are on (ForwardCall::deadline_ms).
  InboxUpstream(Inbox& inbox, std::map<std::string, Handler> handlers, Clock& clock)
      : inbox_(inbox), handlers_(std::move(handlers)), clock_(clock) {}

  void Forward(ForwardCall call, std::function<void(ForwardReply)> done) override;
  void QueryOutcome(const std::string& tenant, const std::string& command_id,
                    int64_t deadline_ms,
                    std::function<void(absl::StatusOr<v1::QueryOutcomeResponse>)> done) override;
  bool Reachable() override { return true; }
  MethodKnown Knows(const std::string& method) override {
    return handlers_.count(method) > 0 ? MethodKnown::kServed : MethodKnown::kNotServed;
  }
  absl::StatusOr<v1::ExportSlotDataResponse> ExportSlotData(
      const v1::ExportSlotDataRequest& request, int64_t deadline_ms) override;
  absl::StatusOr<v1::ImportSlotDataResponse> ImportSlotData(
      const v1::ImportSlotDataRequest& request, int64_t deadline_ms) override;
  absl::StatusOr<v1::HoldSlotDataResponse> HoldSlotData(const v1::HoldSlotDataRequest& request,
                                                        int64_t deadline_ms) override;
  absl::StatusOr<v1::DropSlotDataResponse> DropSlotData(const v1::DropSlotDataRequest& request,
                                                        int64_t deadline_ms) override;
  absl::StatusOr<v1::ListEffectsResponse> ListEffects(const std::string& tenant,
                                                      const v1::ListEffectsRequest& request,
                                                      int64_t deadline_ms) override;

  // The identity the business sees for a forwarded call (what the sidecar's metadata
  // carries over gRPC).
  static CallIdentity IdentityOf(const ForwardCall& call);

 private:
  Inbox& inbox_;
  const std::map<std::string, Handler> handlers_;
  Clock& clock_;
};

}  // namespace eonce

#endif  // EONCE_SERVICES_INBOX_INBOX_UPSTREAM_H_
