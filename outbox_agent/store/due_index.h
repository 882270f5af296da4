// DueIndex: the outbox's due queue, in memory. It holds one entry per record that may be
// attempted at some time: the head of its entity's lane, in a waiting state, at its next
// attempt time (or, when claimed, at its claim's expiry, so a dead worker's record is
// taken over). The replay loop asks it which records are due now, earliest first.
//
// Nothing on disk mirrors it: the store rebuilds it when it opens, from the records in
// waiting states and the lanes, and changes it after each written batch, under the lane's
// lock. A scan that runs meanwhile may miss an entry for one pass, never see one that
// was not written: whoever reads a record it names checks the record itself.
//
// A record can be held: it is kept out of the queue, whatever time it is given, until it
// is released (a new record until its insert is durable, so that nothing is attempted,
// or announced as attempted, before Enqueue could say yes to it).
//
// Bounded by the waiting records (the outbox's pending limit). Thread-safe.
#ifndef EONCE_OUTBOX_AGENT_STORE_DUE_INDEX_H_
#define EONCE_OUTBOX_AGENT_STORE_DUE_INDEX_H_

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

namespace eonce {

class DueIndex {
 public:
  // `command_id` is due at `at_ms`, instead of any time it had.
  void Set(const std::string& command_id, int64_t at_ms);
  // `command_id` is due at no time.
  void Remove(const std::string& command_id);
  // Keeps `command_id` out of the queue until Release; Set and Remove meanwhile only say
  // what Release will do.
  void Hold(const std::string& command_id);
  void Release(const std::string& command_id);
  // Moves `command_id` to `not_before_ms` if it is in the queue at an earlier time; an id
  // not in the queue, or held, is left alone. It only ever delays: a write that sets the
  // id's time afterwards (Set, Remove) overrides it.
  void Postpone(const std::string& command_id, int64_t not_before_ms);

  // At most `limit` command ids due at or before `now_ms`, earliest first.
  std::vector<std::string> DueBy(int64_t now_ms, int limit) const;
  // The earliest due time; nullopt when nothing is due at any time.
  std::optional<int64_t> Earliest() const;
  size_t size() const;

 private:
  mutable absl::Mutex mu_;
  std::set<std::pair<int64_t, std::string>> by_time_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, int64_t> at_ ABSL_GUARDED_BY(mu_);
  // Held ids, with the time they are due at once released (none: not due).
  absl::flat_hash_map<std::string, std::optional<int64_t>> held_ ABSL_GUARDED_BY(mu_);

  void SetLocked(const std::string& command_id, int64_t at_ms)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RemoveLocked(const std::string& command_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
};

}  // namespace eonce

#endif  // EONCE_OUTBOX_AGENT_STORE_DUE_INDEX_H_
