// The one conversion between absl::Status and grpc::Status, at each RPC boundary.
//
// Server side: the status code and message map one to one (the numeric codes are the
// same); the reason and retry delay become trailing metadata. Client side: the reverse.
#ifndef EONCE_COMMON_GRPC_STATUS_H_
#define EONCE_COMMON_GRPC_STATUS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/client_context.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/server_callback.h"
#include "grpcpp/support/status.h"

namespace eonce {

inline constexpr char kReasonTrailer[] = "eonce-reason";
inline constexpr char kRetryAfterTrailer[] = "eonce-retry-after-ms";

// Converts `status` for the wire, adding its reason and retry delay to `context`'s
// trailing metadata. `context` may be null.
grpc::Status ToGrpcStatus(const absl::Status& status, grpc::ServerContextBase* context);

// Converts a finished call's status back, reading the trailers from `context`, which
// may be null.
absl::Status FromGrpcStatus(const grpc::Status& status, const grpc::ClientContext* context);

// Finishes a unary callback call with `result`: the value into `response`, or the error
// (with its reason and retry delay as trailers).
template <typename T>
grpc::ServerUnaryReactor* FinishUnary(grpc::CallbackServerContext* context,
                                      absl::StatusOr<T> result, T* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (result.ok()) *response = std::move(*result);
  reactor->Finish(ToGrpcStatus(result.status(), context));
  return reactor;
}

}  // namespace eonce

#endif  // EONCE_COMMON_GRPC_STATUS_H_
