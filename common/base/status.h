// Status helpers shared by every component.
//
// Errors travel as absl::Status. A status may carry payloads that callers act on: a
// machine-readable reason ("IN_PROGRESS", "IDEMPOTENCY_CONFLICT", ...), a retry delay,
// and facts about the occurrence (metadata: the method, the tenant, ...). At the gRPC
// boundary they become the standard google.rpc.Status details (ErrorInfo, RetryInfo;
// common/rpc/grpc_status.h), and are read back by FromGrpcStatus.
#ifndef EONCE_COMMON_BASE_STATUS_H_
#define EONCE_COMMON_BASE_STATUS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "rocksdb/status.h"

namespace eonce {

#define EONCE_STATUS_CONCAT_INNER(a, b) a##b
#define EONCE_STATUS_CONCAT(a, b) EONCE_STATUS_CONCAT_INNER(a, b)

#define EONCE_RETURN_IF_ERROR(expr)                  \
  do {                                               \
    ::absl::Status eonce_status_ = (expr);           \
    if (!eonce_status_.ok()) return eonce_status_;   \
  } while (0)

#define EONCE_ASSIGN_OR_RETURN(lhs, expr) \
  EONCE_ASSIGN_OR_RETURN_IMPL(EONCE_STATUS_CONCAT(eonce_statusor_, __LINE__), lhs, expr)

#define EONCE_ASSIGN_OR_RETURN_IMPL(statusor, lhs, expr) \
  auto statusor = (expr);                                \
  if (!statusor.ok()) return statusor.status();          \
  lhs = std::move(statusor).value()

inline constexpr absl::string_view kReasonPayload = "eonce.reason";
inline constexpr absl::string_view kRetryAfterPayload = "eonce.retry_after_ms";
inline constexpr absl::string_view kMetadataPayloadPrefix = "eonce.meta.";

// Returns `status` with a machine-readable reason attached.
absl::Status WithReason(absl::Status status, absl::string_view reason);
// Returns `status` with a retry delay attached.
absl::Status WithRetryAfter(absl::Status status, int64_t retry_after_ms);
// The reason attached to `status`, or "" if none.
std::string ReasonOf(const absl::Status& status);
std::optional<int64_t> RetryAfterOf(const absl::Status& status);
// Returns `status` with a fact about the occurrence attached (ErrorInfo metadata).
absl::Status WithErrorMetadata(absl::Status status, absl::string_view key,
                               absl::string_view value);
// The facts attached to `status`, by key.
std::map<std::string, std::string> ErrorMetadataOf(const absl::Status& status);

// The name of a gRPC status code ("INVALID_ARGUMENT"); "UNKNOWN" for a number that is
// none.
std::string CodeName(int code);

// Builds a status with a reason in one call.
absl::Status Error(absl::StatusCode code, absl::string_view reason,
                   absl::string_view message);

// The one conversion from RocksDB's status. A full disk is RESOURCE_EXHAUSTED, other I/O
// errors UNAVAILABLE, corruption DATA_LOSS. `what` names the operation.
absl::Status FromRocks(const rocksdb::Status& status, absl::string_view what);

}  // namespace eonce

#endif  // EONCE_COMMON_BASE_STATUS_H_
