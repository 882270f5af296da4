// The one conversion between absl::Status and grpc::Status, at each RPC boundary.
//
// Server side: the status code and message map one to one (the numeric codes are the
// same). The details travel in gRPC's richer error model, a google.rpc.Status in the
// grpc-status-details-bin trailer, which every gRPC library decodes:
//   google.rpc.ErrorInfo  the reason, domain "eonce.io", and metadata (the facts of the
//                         occurrence), on every error;
//   google.rpc.RetryInfo  the retry delay, on every retryable answer (UNAVAILABLE and
//                         ABORTED always; others when the status carries a delay);
//   eonce.v1.Rejection    for a business rejection (RejectionStatusDetails).
// The older trailers eonce-reason and eonce-retry-after-ms are still sent, deprecated:
// they go in the next release. Client side: the reverse, from the details, else from
// the trailers.
#ifndef EONCE_COMMON_RPC_GRPC_STATUS_H_
#define EONCE_COMMON_RPC_GRPC_STATUS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/rpc/error_details.h"
#include "eonce/v1/command.pb.h"
#include "grpcpp/client_context.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/server_callback.h"
#include "grpcpp/support/status.h"

namespace eonce {

// Deprecated: read the google.rpc.Status details instead.
inline constexpr char kReasonTrailer[] = "eonce-reason";
inline constexpr char kRetryAfterTrailer[] = "eonce-retry-after-ms";

// Converts `status` for the wire: code, message and google.rpc.Status details, plus the
// deprecated trailers on `context` (which may be null).
grpc::Status ToGrpcStatus(const absl::Status& status, grpc::ServerContextBase* context);

// Converts a finished call's status back: reason, retry delay and metadata from the
// google.rpc.Status details, else from the trailers on `context` (which may be null).
// A refusal made before any handler ran (a business port's caller gate,
// services/inbox/caller_gate.h) has neither: gRPC sends its code and message only, and the
// message begins with the reason ("NO_IDENTITY: ..."), read back for UNAUTHENTICATED and
// PERMISSION_DENIED.
absl::Status FromGrpcStatus(const grpc::Status& status, const grpc::ClientContext* context);

// A status sent as its parts (a batch's item): code, message and a serialized
// google.rpc.Status, read as FromGrpcStatus reads a call's.
absl::Status StatusFromParts(int code, const std::string& message, const std::string& details);
// The other way: `status` written into a batch's item (SubmitBatchItem, EnqueueBatchItem:
// code, message, error_details), for StatusFromParts to read back.
template <typename Item>
void SetStatusParts(const absl::Status& status, Item* item) {
  item->set_code(static_cast<int>(status.code()));
  item->set_message(std::string(status.message()));
  item->set_error_details(StatusDetails(status));
}

// A finished call that ended because its request or its answer was larger than a message
// limit: RESOURCE_EXHAUSTED with gRPC's "larger than max" and no reason of eonce's (every
// refusal of eonce's own carries one), or with the reason MESSAGE_TOO_LARGE (a batch's
// answer the server kept from going past its limit). Either side of the call may be the
// one that refused, so it says nothing of whether the server ran the call.
bool PastMessageLimit(const absl::Status& status);

// A stored business answer for the wire, replayed byte for byte: its code, message and
// details. An answer without details (a business that sends none) gets the standard
// google.rpc.Status of its code.
grpc::Status StatusOfResult(const v1::CallResult& result);

// Finishes a unary callback call with `result`: the value into `response`, or the error
// (with its details).
template <typename T>
grpc::ServerUnaryReactor* FinishUnary(grpc::CallbackServerContext* context,
                                      absl::StatusOr<T> result, T* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (result.ok()) *response = std::move(*result);
  reactor->Finish(ToGrpcStatus(result.status(), context));
  return reactor;
}

}  // namespace eonce

#endif  // EONCE_COMMON_RPC_GRPC_STATUS_H_
