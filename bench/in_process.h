// eonce bench, in process: first-seen commands through a sidecar that runs in the ledger's
// own process (services/inbox/inbox_upstream.h) — one gRPC hop per command instead of
// two, the same records, policy and commit point.
#ifndef EONCE_BENCH_IN_PROCESS_H_
#define EONCE_BENCH_IN_PROCESS_H_

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "bench/loops.h"

namespace eonce::bench {

// Measures at each of `points` calls in flight, on a fresh ledger under `dir` holding
// accounts a0..a(accounts-1); (in flight, figures) in `out`, and the same through
// SubmitBatch calls (BatchedSubmitter) at each of `batched_points` in `batched`. Each run
// is paired (MeasurePaired) with a run of `limit(n)` and one of `reference(n)` before it.
absl::Status BenchInProcess(const MeasureOptions& measure, const std::vector<int>& points,
                            const std::vector<int>& batched_points, const std::string& dir,
                            int accounts, const std::function<LimitRunFn(int)>& limit,
                            const std::function<LimitRunFn(int)>& reference,
                            std::vector<std::pair<int, Figures>>* out,
                            std::vector<std::pair<int, Figures>>* batched);

}  // namespace eonce::bench

#endif  // EONCE_BENCH_IN_PROCESS_H_
