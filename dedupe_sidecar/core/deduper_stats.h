// DeduperStats: the Deduper's counters, declared in one place as one list, which the
// metrics endpoint exports. Each is atomic: bumped from any thread without a lock.
#ifndef EONCE_DEDUPE_SIDECAR_CORE_DEDUPER_STATS_H_
#define EONCE_DEDUPE_SIDECAR_CORE_DEDUPER_STATS_H_

#include <atomic>
#include <cstdint>

#include "common/base/metrics.h"

namespace eonce {

// Counters the metrics endpoint exports.
struct DeduperStats {
  std::atomic<int64_t> applied{0};
  std::atomic<int64_t> rejected{0};        // business rejections stored
  std::atomic<int64_t> replayed{0};        // duplicates answered from the store
  std::atomic<int64_t> conflicts{0};
  std::atomic<int64_t> in_progress{0};
  std::atomic<int64_t> expired{0};
  std::atomic<int64_t> denied{0};
  std::atomic<int64_t> invalid{0};
  std::atomic<int64_t> recovered{0};
  std::atomic<int64_t> parked{0};
  std::atomic<int64_t> pending{0};          // unknown outcomes awaiting recovery
  std::atomic<int64_t> upstream_unavailable{0};
  std::atomic<int64_t> fenced{0};           // late answers refused by their token
  std::atomic<int64_t> refused{0};          // turned away by the business, key freed
  std::atomic<int64_t> store_errors{0};
  // Refused before anything was decided because the audit log's writer is behind.
  std::atomic<int64_t> audit_backlog{0};
  std::atomic<int64_t> forwards{0};
  // Forwards sent before their started record was synced (InboxMethods).
  std::atomic<int64_t> forwards_before_sync{0};
  // Of those, forwards whose started record was only claimed in memory (InFlightClaims).
  std::atomic<int64_t> claimed_in_memory{0};
  // Refused because another shard owns the slot (SLOT_MOVED) or it is moving.
  std::atomic<int64_t> slot_moved{0};
  std::atomic<int64_t> slot_migrating{0};
  // Malformed W3C trace context dropped (the call went on without it).
  std::atomic<int64_t> traceparents_dropped{0};
  std::atomic<int64_t> tracestates_dropped{0};
  LatencyHistogram forward_latency;
};

}  // namespace eonce

#endif  // EONCE_DEDUPE_SIDECAR_CORE_DEDUPER_STATS_H_
