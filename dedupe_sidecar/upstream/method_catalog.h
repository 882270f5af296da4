// MethodCatalog: which methods the business service implements, learned from the
// service itself through gRPC server reflection, so that a command naming a method it
// does not have is refused before anything is written, and transparent mode forwards only
// the business's own methods.
//
// Knows(method) answers at once from the catalog held, on any thread (gRPC's callback
// threads call it, and must never wait for the business). The catalog is read on a thread
// of its own: once at construction, then again when a method missing from a catalog
// older than kFreshMs is asked about (so a method a new deploy of the business just added
// is found), one read at a time and none sooner than kMinRefreshIntervalMs after the last.
// While a read is due or under way, a method the catalog does not list is kNotYetKnown
// (retryable), not kNotServed.
//
// A catalog is taken only from a business that says it is serving (grpc.health.v1, the
// whole server: asked before and after the reflection calls): one starting up may answer
// reflection before its services are all registered, and a catalog read then would make
// a command for one of its methods look wrong for good. Until the business has served one,
// every method it does not list is kNotYetKnown. A business without a health service
// counts as serving (nothing else can tell). One without reflection (it answers
// UNIMPLEMENTED while serving) is kCannotTell, asked again every kUnsupportedRecheckMs.
//
// Bounded: one read lists at most kMaxServices services and kMaxMethods methods, and each
// of its calls takes at most `refresh_timeout_ms`. Thread-safe; Stop (or the destructor)
// cancels a read under way and joins the thread.
#ifndef EONCE_DEDUPE_SIDECAR_UPSTREAM_METHOD_CATALOG_H_
#define EONCE_DEDUPE_SIDECAR_UPSTREAM_METHOD_CATALOG_H_

#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "dedupe_sidecar/upstream/upstream.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"

namespace eonce {

class MethodCatalog {
 public:
  static constexpr int64_t kFreshMs = 1'000;
  static constexpr int64_t kMinRefreshIntervalMs = 200;
  static constexpr int64_t kRefreshTimeoutMs = 500;
  // Retry interval when the business offers no reflection.
  static constexpr int64_t kUnsupportedRecheckMs = 60'000;
  static constexpr int kMaxServices = 64;
  static constexpr int kMaxMethods = 4096;

  // Starts the reader, which reads the catalog at once.
  MethodCatalog(std::shared_ptr<grpc::Channel> channel, Clock& clock,
                int64_t refresh_timeout_ms = kRefreshTimeoutMs);
  ~MethodCatalog();

  MethodKnown Knows(const std::string& method);
  // Whether the catalog held lists `method`, without asking for a read (false before any
  // catalog, or without reflection).
  bool Listed(const std::string& method);
  // Waits until no read is due or under way (at most `limit`); whether none is. For the
  // start of a server (so that its first commands find the catalog) and for tests: never
  // on a callback thread.
  bool AwaitSettled(absl::Duration limit);
  // Cancels a read under way and ends the reader; Knows answers from what is held.
  void Stop();
  // Reads finished so far, and reads that gave a catalog.
  int64_t reads() const;
  int64_t catalogs() const;

 private:
  void ReaderLoop();
  // Asks for a read, unless one is due or under way, or the last ended too recently.
  void RequestReadLocked(int64_t now_ms) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One read, on the reader thread; the catalog, or why there is none: UNIMPLEMENTED (no
  // reflection on a serving business), UNAVAILABLE NOT_SERVING, or the call's error.
  absl::StatusOr<absl::flat_hash_set<std::string>> Fetch();
  absl::StatusOr<absl::flat_hash_set<std::string>> FetchMethods();
  // OK when the business says it serves (or offers no health service).
  absl::Status CheckServing();
  // A ClientContext for one call of a read, with its deadline, that Stop can cancel; false
  // once stopping.
  bool Track(grpc::ClientContext* context);
  void Untrack();

  std::shared_ptr<grpc::Channel> channel_;
  Clock& clock_;
  const int64_t refresh_timeout_ms_;
  mutable absl::Mutex mu_;
  bool known_ ABSL_GUARDED_BY(mu_) = false;        // a catalog read from a serving business
  bool unsupported_ ABSL_GUARDED_BY(mu_) = false;  // serving, without reflection
  bool due_ ABSL_GUARDED_BY(mu_) = false;          // a read is asked for
  bool reading_ ABSL_GUARDED_BY(mu_) = false;      // a read is under way
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int64_t fetched_at_ms_ ABSL_GUARDED_BY(mu_) = 0;  // of the catalog held
  int64_t tried_at_ms_ ABSL_GUARDED_BY(mu_) = 0;    // the end of the last read
  int64_t reads_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t catalogs_ ABSL_GUARDED_BY(mu_) = 0;
  grpc::ClientContext* in_flight_ ABSL_GUARDED_BY(mu_) = nullptr;
  absl::flat_hash_set<std::string> methods_ ABSL_GUARDED_BY(mu_);
  absl::Mutex stop_mu_;  // one join of the reader
  std::thread reader_;   // last: started once everything above is set
};

}  // namespace eonce

#endif  // EONCE_DEDUPE_SIDECAR_UPSTREAM_METHOD_CATALOG_H_
