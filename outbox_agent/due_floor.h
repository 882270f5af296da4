// DueFloor: a lower bound of the due times in the outbox's `due` index, so that the scan
// for due records seeks past the deletion markers that claimed records leave at the
// front of the index, instead of stepping over all of them on every pass.
//
// Writers announce each due time before their batch is written (Writing) and say when
// the write is over (Written); the scanner asks where to start (BeginScan) and, after
// its pass, reports the earliest live due time it saw (EndScan). The floor only rises to
// what the scan saw and never above a due time written while the scan ran or still in
// flight when it began, so no live entry is ever below it. Thread-safe; one scanner at a
// time (the replay loop).
#ifndef EONCE_OUTBOX_AGENT_DUE_FLOOR_H_
#define EONCE_OUTBOX_AGENT_DUE_FLOOR_H_

#include <algorithm>
#include <cstdint>
#include <limits>
#include <set>

#include "absl/synchronization/mutex.h"

namespace eonce {

class DueFloor {
 public:
  static constexpr int64_t kNone = std::numeric_limits<int64_t>::max();

  void Writing(int64_t due_ms) {
    absl::MutexLock lock(&mu_);
    in_flight_.insert(due_ms);
    floor_ = std::min(floor_, due_ms);
    written_during_scan_ = std::min(written_during_scan_, due_ms);
  }
  void Written(int64_t due_ms) {
    absl::MutexLock lock(&mu_);
    auto it = in_flight_.find(due_ms);
    if (it != in_flight_.end()) in_flight_.erase(it);
  }

  // Where the scan starts: no live due entry is earlier.
  int64_t BeginScan() {
    absl::MutexLock lock(&mu_);
    written_during_scan_ = in_flight_.empty() ? kNone : *in_flight_.begin();
    return floor_;
  }
  int64_t floor() {
    absl::MutexLock lock(&mu_);
    return floor_;
  }
  // `first_live_ms`: the earliest due time the scan saw (kNone when it saw none before
  // where it stopped, `scanned_to_ms`, exclusive).
  void EndScan(int64_t first_live_ms, int64_t scanned_to_ms) {
    absl::MutexLock lock(&mu_);
    const int64_t seen = std::min(first_live_ms, scanned_to_ms);
    floor_ = std::max(floor_, std::min(seen, written_during_scan_));
  }

 private:
  absl::Mutex mu_;
  int64_t floor_ ABSL_GUARDED_BY(mu_) = 0;
  std::multiset<int64_t> in_flight_ ABSL_GUARDED_BY(mu_);
  int64_t written_during_scan_ ABSL_GUARDED_BY(mu_) = kNone;
};

}  // namespace eonce

#endif  // EONCE_OUTBOX_AGENT_DUE_FLOOR_H_
