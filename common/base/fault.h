// Fault points: named places where a component can be made to crash, fail or stall.
//
// They are compiled into the real code. A component holds a `FaultInjector*` that is
// null in production, so an off fault point costs one pointer test. The simulation and
// the fault tests hand in an injector whose decisions come from a seed.
#ifndef EONCE_COMMON_BASE_FAULT_H_
#define EONCE_COMMON_BASE_FAULT_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace eonce {

enum class FaultPoint {
  // The article's seven, on the producer side.
  kBeforeOutboxWrite,
  kAfterOutboxWrite,
  kAfterClaim,
  kBeforeNetworkSend,
  kAfterNetworkSendBeforeResponse,
  kAfterResponseBeforeAck,
  kAfterAckBeforeProjection,
  // The sidecar's.
  kAfterRecordStartedBeforeForward,
  kAfterForwardBeforeCommit,
  kAfterCommitBeforeResponse,
  // The business service's.
  kAfterApplyBeforeResponse,
  kCount,
};

// "before-outbox-write", ... as used in logs, flags and reports.
absl::string_view FaultPointName(FaultPoint point);

class FaultInjector {
 public:
  virtual ~FaultInjector() = default;
  // OK to go on; an error to fail the operation here. A crash is modelled by the
  // injector (the simulation stops the component and returns ABORTED).
  virtual absl::Status Hit(FaultPoint point) = 0;
};

inline absl::Status HitFault(FaultInjector* faults, FaultPoint point) {
  return faults == nullptr ? absl::OkStatus() : faults->Hit(point);
}

}  // namespace eonce

#endif  // EONCE_COMMON_BASE_FAULT_H_
