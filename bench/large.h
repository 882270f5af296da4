// eonce bench, a large store: duplicates answered by a sidecar holding a million records,
// against the same sidecar binary holding a small store, and its memory and disk.
#ifndef EONCE_BENCH_LARGE_H_
#define EONCE_BENCH_LARGE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "bench/loops.h"

namespace eonce::bench {

struct LargeStoreFigures {
  // Duplicates at 64 in flight against the large store, each run paired with a run
  // against the small one just before it (paired_ratio: large over small).
  Figures large;
  // The small store's median run, for its p99.
  Figures small;
  int64_t records = 0;
  int64_t raw_bytes = 0;  // key + payload hash + response, summed over the large store
  int64_t sst_bytes = 0;
  int64_t rss_kb = -1;  // the large store's sidecar after the runs
};

// The records a small store holds: a few seconds of first-seen commands.
inline constexpr int64_t kSmallStoreRecords = 10'000;

// Writes `records` committed records into one store and kSmallStoreRecords into another
// under `dir`, compacts both, starts a ledger and one sidecar process per store (from
// `bin_dir`) and measures duplicates against both in alternation. Both sidecars are
// processes of their own, with the same flags, so the ratio compares store sizes only.
// `block_cache_mb` > 0 sizes both sidecars' block caches (`--block_cache_mb`); 0 leaves
// the sidecar's default.
absl::Status BenchLargeStore(const MeasureOptions& measure, const std::string& bin_dir,
                             const std::string& dir, int64_t records, int accounts,
                             int block_cache_mb, LargeStoreFigures* out);

}  // namespace eonce::bench

#endif  // EONCE_BENCH_LARGE_H_
