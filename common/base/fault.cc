#include "common/base/fault.h"

namespace eonce {

absl::string_view FaultPointName(FaultPoint point) {
  switch (point) {
    case FaultPoint::kBeforeOutboxWrite: return "before-outbox-write";
    case FaultPoint::kAfterOutboxWrite: return "after-outbox-write";
    case FaultPoint::kAfterClaim: return "after-claim";
    case FaultPoint::kBeforeNetworkSend: return "before-network-send";
    case FaultPoint::kAfterNetworkSendBeforeResponse:
      return "after-network-send-before-response";
    case FaultPoint::kAfterResponseBeforeAck: return "after-response-before-ack";
    case FaultPoint::kAfterAckBeforeProjection: return "after-ack-before-projection";
    case FaultPoint::kAfterRecordStartedBeforeForward:
      return "after-record-started-before-forward";
    case FaultPoint::kAfterForwardBeforeCommit: return "after-forward-before-commit";
    case FaultPoint::kAfterCommitBeforeResponse: return "after-commit-before-response";
    case FaultPoint::kAfterApplyBeforeResponse: return "after-apply-before-response";
    case FaultPoint::kCount: break;
  }
  return "unknown";
}

}  // namespace eonce
