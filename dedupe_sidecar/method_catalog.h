// MethodCatalog: which methods the business service implements, learned from the
// service itself through gRPC server reflection, so that a command naming a method it
// does not have is refused before anything is written.
//
// Implements(method) answers from the last catalog. A method missing from a catalog
// older than kFreshMs triggers one refresh first (so a method a new deploy of the business
// just added is found), at most one refresh at a time and none more often than kFreshMs.
// Without reflection on the business (or before it was ever reached) the answer is
// nullopt: the command is forwarded, and a business that answers UNIMPLEMENTED still
// gets nothing stored (Deduper).
//
// Bounded: one refresh lists at most kMaxServices services and kMaxMethods methods, and
// takes at most kRefreshTimeoutMs. Thread-safe.
#ifndef EONCE_DEDUPE_SIDECAR_METHOD_CATALOG_H_
#define EONCE_DEDUPE_SIDECAR_METHOD_CATALOG_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "grpcpp/channel.h"

namespace eonce {

class MethodCatalog {
 public:
  static constexpr int64_t kFreshMs = 1'000;
  static constexpr int64_t kRefreshTimeoutMs = 500;
  // Retry interval when the business offers no reflection.
  static constexpr int64_t kUnsupportedRecheckMs = 60'000;
  static constexpr int kMaxServices = 64;
  static constexpr int kMaxMethods = 4096;

  MethodCatalog(std::shared_ptr<grpc::Channel> channel, Clock& clock);

  // Whether the business implements `method` ("/package.Service/Method"); nullopt when
  // that cannot be known.
  std::optional<bool> Implements(const std::string& method);
  // Whether the last catalog lists `method`, without asking the business again (false
  // before any catalog, or without reflection).
  bool Listed(const std::string& method);

  // Fetches the catalog now. UNIMPLEMENTED: the business offers no reflection.
  absl::Status Refresh();

 private:
  absl::StatusOr<absl::flat_hash_set<std::string>> Fetch();

  std::shared_ptr<grpc::Channel> channel_;
  Clock& clock_;
  absl::Mutex refresh_mu_;  // one refresh at a time; held across the fetch
  absl::Mutex mu_;
  bool known_ ABSL_GUARDED_BY(mu_) = false;
  bool unsupported_ ABSL_GUARDED_BY(mu_) = false;
  int64_t fetched_at_ms_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t tried_at_ms_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_set<std::string> methods_ ABSL_GUARDED_BY(mu_);
};

}  // namespace eonce

#endif  // EONCE_DEDUPE_SIDECAR_METHOD_CATALOG_H_
