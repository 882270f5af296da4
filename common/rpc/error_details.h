// gRPC's richer error model without gRPC: the google.rpc.Status that carries an error's
// reason (ErrorInfo, domain "eonce.io", metadata), its retry delay (RetryInfo, on every
// retryable error) and, for a business rejection, the eonce.v1.Rejection. The gRPC
// boundary (common/rpc/grpc_status.h) sends it as grpc-status-details-bin; the inbox library
// stores it with a rejection.
#ifndef EONCE_COMMON_RPC_ERROR_DETAILS_H_
#define EONCE_COMMON_RPC_ERROR_DETAILS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "eonce/v1/command.pb.h"

namespace eonce {

inline constexpr char kErrorDomain[] = "eonce.io";
// The retry delay a retryable answer without its own carries.
inline constexpr int64_t kDefaultRetryAfterMs = 100;

// The serialized google.rpc.Status for `status` (which must not be OK).
std::string StatusDetails(const absl::Status& status);

// The serialized google.rpc.Status of a business rejection: ErrorInfo with the
// rejection's reason, and the eonce.v1.Rejection itself.
std::string RejectionStatusDetails(absl::StatusCode code, const std::string& message,
                                   const v1::Rejection& rejection);

// The eonce.v1.Rejection in serialized details: packed in a google.rpc.Status, or (as
// records stored by older versions hold it) bare. nullopt when there is none.
std::optional<v1::Rejection> RejectionOf(const std::string& details);

// Adds what serialized google.rpc.Status details say (reason, retry delay, metadata) to
// `status`. Returns false when `details` is not a google.rpc.Status; `*has_reason` and
// `*has_retry` say what was found.
bool ApplyStatusDetails(const std::string& details, absl::Status* status, bool* has_reason,
                        bool* has_retry);

}  // namespace eonce

#endif  // EONCE_COMMON_RPC_ERROR_DETAILS_H_
