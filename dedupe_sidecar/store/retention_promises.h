// RetentionPromises: how long the sidecar promises that its stored records live, kept
// across restarts.
//
// Two promises: the retention (a finished record answers duplicates this long; GetInfo's
// retention_ms, and an agent sends nothing older) and the forensic retention (its
// tombstone then catches a late conflict until this long after it finished; GetInfo's
// forensic_retention_ms). A record's trim and drop times are stamped when it is written,
// so a lengthened value does not reach records already stored: the advertised value stays
// at the old one until now >= change + new value, when every record written under the
// old value has outlived it; a shortened one applies at once (stored records only live
// longer than promised). Each promise is kept in the store's meta column family, so a
// restart in between keeps it.
//
// Thread-safe. The RocksStore must outlive it.
#ifndef EONCE_DEDUPE_SIDECAR_STORE_RETENTION_PROMISES_H_
#define EONCE_DEDUPE_SIDECAR_STORE_RETENTION_PROMISES_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/base/clock.h"
#include "common/store/rocks.h"
#include "eonce/internal/records.pb.h"

namespace eonce {

struct RetentionOptions {
  int64_t retention_ms = 7LL * 24 * 3600 * 1000;
  int64_t forensic_retention_ms = 30LL * 24 * 3600 * 1000;
};

class RetentionPromises {
 public:
  // `meta_family`: the column family of `store` that keeps the promises. Until Settle,
  // the configured values are advertised.
  RetentionPromises(RocksStore& store, Clock& clock, std::string meta_family,
                    const RetentionOptions& configured);

  // Reconciles the configured values with the stored promises; called once at start,
  // before anything is served. Synced.
  absl::Status Settle();
  // Each promise as it stands now.
  internal::RetentionPromise retention();
  internal::RetentionPromise forensic();

 private:
  RocksStore& store_;
  Clock& clock_;
  const std::string meta_family_;
  const RetentionOptions configured_;
  absl::Mutex mu_;
  internal::RetentionPromise retention_ ABSL_GUARDED_BY(mu_);
  internal::RetentionPromise forensic_ ABSL_GUARDED_BY(mu_);
};

}  // namespace eonce

#endif  // EONCE_DEDUPE_SIDECAR_STORE_RETENTION_PROMISES_H_
