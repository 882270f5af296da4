// Upstream: how the sidecar reaches the business service.
//
// The Deduper only sees this interface: the real one is a gRPC generic stub on the pod's
// localhost (grpc_upstream.h); the simulation hands in one that routes through its
// simulated network. Implementations classify what happened at their boundary:
//   answered      the business gave a status (OK or a terminal rejection): it is the
//                 outcome, stored and replayed
//   not applied   the business proved it did not apply the call (it was never sent, or
//                 it refused with `eonce-not-applied: true`): safe to retry
//   refused       the call was turned away before the business ran it, for a reason that
//                 says nothing about the business: UNIMPLEMENTED (no such method),
//                 UNAUTHENTICATED, PERMISSION_DENIED. Not applied, and not an outcome to
//                 store: the key stays free
//   unknown       anything else (deadline, connection lost after sending, cancelled):
//                 the business may or may not have applied it
//   conflict      a business that keeps an inbox refused the call because its key
//                 belongs to another command or payload (`eonce-inbox: conflict`):
//                 nothing was applied, and the key is not this command's
// A business's FAILED_PRECONDITION SLOT_FENCED (its per-slot fence is above the epoch
// the forward carries: the slot has moved on) is "not applied" too, not an outcome.
// An answer also says whether the business keeps its outcome in an inbox
// (`eonce-inbox: kept`): then the business's durable write is the commit point, and the
// sidecar need not sync its own records for that method (docs/design.md).
#ifndef EONCE_DEDUPE_SIDECAR_UPSTREAM_UPSTREAM_H_
#define EONCE_DEDUPE_SIDECAR_UPSTREAM_UPSTREAM_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "eonce/v1/command.pb.h"
#include "eonce/v1/outcome.pb.h"

namespace grpc {
class CallbackServerContext;
}  // namespace grpc

namespace eonce {

struct ForwardCall {
  std::string method;
  std::string request;
  std::string command_id;
  std::string idempotency_key;
  std::string tenant;
  std::string actor;
  std::string payload_sha256;  // raw bytes, sent in hex
  // "<type>/<id>", whenever the command names one: the business files the call's inbox
  // entry under the entity's slot, so that it moves with the slot (also an entry written
  // before the deployment was sharded).
  std::string entity;
  uint64_t fencing_token = 0;
  // From a sharded sidecar: the command's slot and the epoch of the slot map its gate pass
  // was given by (ShardGate::Pass); the business refuses the write below the slot's fence.
  // slot_epoch 0: unsharded, neither is sent.
  uint32_t slot = 0;
  uint64_t slot_epoch = 0;
  // W3C trace context, sent as traceparent/tracestate metadata: the command's (the
  // agent's attempt span), or a transparent caller's. Empty: none is sent.
  v1::TraceContext trace;
  int64_t deadline_ms = 0;  // absolute, on the Deduper's clock
  // The caller's call, whose cancellation the forward follows; null when there is none.
  grpc::CallbackServerContext* parent = nullptr;
  // The only forward of its caller's call (a unary Submit), made on that call's thread: a
  // business in the same process may sync its store on that thread when the store is
  // quiet (InboxUpstream), instead of handing the wait to its committer thread. False for
  // the items of a batch, whose syncs on one thread would run one after another.
  bool alone = false;
};

struct ForwardReply {
  enum class Kind { kAnswered, kNotApplied, kRefused, kUnknown, kConflict };
  Kind kind = Kind::kUnknown;
  v1::CallResult result;  // kAnswered, kRefused, kConflict: the business status and bytes
  // kAnswered: the business holds this outcome durably in its inbox.
  bool inbox_kept = false;
  // kConflict: the inbox's reason (KEY_REUSED, IDEMPOTENCY_CONFLICT); otherwise: what
  // happened, for logs and the caller.
  std::string detail;
  int64_t entity_revision = 0;
};

// eonce.v1.Forwards/ForwardBatch: several forwards in one call, to a business that serves
// it (services/inbox's ServiceHost). A forward as one of its items and back; the deadline
// and the caller's call do not travel with an item (the batch call has one deadline).
inline constexpr char kForwardBatchMethod[] = "/eonce.v1.Forwards/ForwardBatch";

// What is known at once, without asking the business, of whether it serves a method.
enum class MethodKnown {
  kServed,       // its catalog, read while it was serving, lists the method
  kNotServed,    // a fresh catalog of the serving business does not list it
  // Not known yet: no catalog was read from the serving business (it is starting, or not
  // serving, or unreachable), or the catalog may be old and is being read again. Retry.
  kNotYetKnown,
  kCannotTell,   // the business lists no methods (no reflection): forward and see
};

// eonce's own services and gRPC's standard ones (health, reflection), which a business
// serves to the sidecar and to its operators: never a command's or a caller's method,
// whatever the business's catalog lists.
bool IsReservedMethod(absl::string_view method);

// What a command for `method` gets before anything is written, given what is known of it:
// OK to go on (served, or forward and see); PERMISSION_DENIED RESERVED_METHOD;
// INVALID_ARGUMENT UNKNOWN_METHOD (with the method in the error's metadata); UNAVAILABLE
// CATALOG_PENDING with a retry hint.
absl::Status CommandMethodRefusal(MethodKnown known, const std::string& method);
v1::ForwardedCall ForwardedCallOf(const ForwardCall& call);
ForwardCall ForwardCallOf(const v1::ForwardedCall& call);
v1::ForwardOutcome ForwardOutcomeOf(ForwardReply reply);
ForwardReply ForwardReplyOf(v1::ForwardOutcome outcome);

class Upstream {
 public:
  virtual ~Upstream() = default;
  // Calls the business method; `done` runs exactly once, possibly on another thread.
  virtual void Forward(ForwardCall call, std::function<void(ForwardReply)> done) = 0;
  // Asks the business whether the command was applied. UNIMPLEMENTED means the business
  // keeps no outcomes (legacy): it cannot tell.
  virtual void QueryOutcome(const std::string& tenant, const std::string& command_id,
                            int64_t deadline_ms,
                            std::function<void(absl::StatusOr<v1::QueryOutcomeResponse>)> done) = 0;
  // False when the business is known to be unreachable right now, so that a first-seen
  // command is refused before anything is written.
  virtual bool Reachable() = 0;
  // What is known of whether the business serves `method` (the real one asks the business
  // by server reflection, in the background); answers at once, on any thread. A command
  // for a method it does not serve is refused before anything is written
  // (CommandMethodRefusal); transparent mode forwards only a method it serves.
  virtual MethodKnown Knows(const std::string& /*method*/) { return MethodKnown::kCannotTell; }
  // The business's data by slot (eonce.v1.SlotData), for a slot move; blocking, bounded
  // by `deadline_ms`. UNIMPLEMENTED: the business keeps no data the sidecar moves (it is
  // not built on services/inbox, or it is shared by every shard).
  virtual absl::StatusOr<v1::ExportSlotDataResponse> ExportSlotData(
      const v1::ExportSlotDataRequest& /*request*/, int64_t /*deadline_ms*/) {
    return absl::UnimplementedError("the business keeps no slot data");
  }
  virtual absl::StatusOr<v1::ImportSlotDataResponse> ImportSlotData(
      const v1::ImportSlotDataRequest& /*request*/, int64_t /*deadline_ms*/) {
    return absl::UnimplementedError("the business keeps no slot data");
  }
  virtual absl::StatusOr<v1::DropSlotDataResponse> DropSlotData(
      const v1::DropSlotDataRequest& /*request*/, int64_t /*deadline_ms*/) {
    return absl::UnimplementedError("the business keeps no slot data");
  }
  virtual absl::StatusOr<v1::HoldSlotDataResponse> HoldSlotData(
      const v1::HoldSlotDataRequest& /*request*/, int64_t /*deadline_ms*/) {
    return absl::UnimplementedError("the business keeps no slot data");
  }
  // The business's effects of `tenant` (eonce.v1.Effects), for an operator; blocking,
  // bounded by `deadline_ms`. UNIMPLEMENTED: the business keeps no effect ledger.
  virtual absl::StatusOr<v1::ListEffectsResponse> ListEffects(
      const std::string& /*tenant*/, const v1::ListEffectsRequest& /*request*/,
      int64_t /*deadline_ms*/) {
    return absl::UnimplementedError("the business keeps no effect ledger");
  }
};

}  // namespace eonce

#endif  // EONCE_DEDUPE_SIDECAR_UPSTREAM_UPSTREAM_H_
