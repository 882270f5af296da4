// InFlightClaims: the keys whose first attempt is in flight to a business that keeps an
// inbox, held in memory instead of a `started` record in the store.
//
// For such a business the inbox is the commit point (docs/design.md, "Where the truth
// is"): its entry, written in the effect's own batch, refuses a second apply and a reused
// key or payload. What the sidecar's started record still did there was block concurrent
// duplicates (IN_PROGRESS) and refuse another payload under the key while the first
// attempt runs; a claim does the same without a write. A claim is lost with the process,
// as an unsynced started record was lost with the machine: the next attempt is forwarded
// again and answered by the inbox.
//
// A claim holds the record a started write would have stored, fencing token included. It
// leaves only after what replaces it is in the store (the outcome, or a started record
// that recovery takes over), or when the business said that nothing was applied; so a
// reader that looks here first and in the store second never misses a command.
//
// Bounded: past `max_claims` Add refuses, and the Deduper writes a started record as for
// any other business. Thread-safe; the Deduper serializes the changes of one key under
// its key lock. Add is virtual only for a negative control (a table that forgets).
#ifndef EONCE_DEDUPE_SIDECAR_CORE_IN_FLIGHT_CLAIMS_H_
#define EONCE_DEDUPE_SIDECAR_CORE_IN_FLIGHT_CLAIMS_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "dedupe_sidecar/store/record_store.h"

namespace eonce {

class InFlightClaims {
 public:
  static constexpr size_t kDefaultMaxClaims = 65'536;

  explicit InFlightClaims(size_t max_claims = kDefaultMaxClaims) : max_claims_(max_claims) {}
  virtual ~InFlightClaims() = default;

  // Claims `scoped_key` for `record` (a started record); false when the table is full or
  // the key is claimed already.
  virtual bool Add(const std::string& scoped_key, const Record& record);
  // The record the claim on `scoped_key` holds, if any.
  std::optional<Record> Get(const std::string& scoped_key) const;
  // The record the claim holds if `token` holds it (fencing, as RecordStore::HeldBy).
  std::optional<Record> HeldBy(const std::string& scoped_key, uint64_t token) const;
  // The idempotency key a claimed command id was submitted under, within the tenant.
  std::optional<std::string> KeyOfCommand(const std::string& tenant,
                                          const std::string& command_id) const;
  // Drops the claim if `token` holds it; whether it did.
  bool Remove(const std::string& scoped_key, uint64_t token);
  size_t size() const;

 private:
  static std::string CommandKey(const std::string& tenant, const std::string& command_id);

  const size_t max_claims_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Record> claims_ ABSL_GUARDED_BY(mu_);
  // (tenant, command id) -> idempotency key, for Reconcile by command id.
  absl::flat_hash_map<std::string, std::string> by_command_ ABSL_GUARDED_BY(mu_);
};

}  // namespace eonce

#endif  // EONCE_DEDUPE_SIDECAR_CORE_IN_FLIGHT_CLAIMS_H_
