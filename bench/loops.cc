#include "bench/loops.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace eonce::bench {
namespace {

using SteadyClock = std::chrono::steady_clock;

SteadyClock::time_point After(double seconds) {
  return SteadyClock::now() + std::chrono::duration_cast<SteadyClock::duration>(
                                  std::chrono::duration<double>(seconds));
}

Figures Summarize(std::vector<double> latencies_us, int64_t errors, double elapsed_s) {
  Figures f;
  f.ops = static_cast<int64_t>(latencies_us.size());
  f.errors = errors;
  f.ops_per_s = elapsed_s > 0 ? f.ops / elapsed_s : 0;
  std::sort(latencies_us.begin(), latencies_us.end());
  if (!latencies_us.empty()) {
    f.p50_us = latencies_us[latencies_us.size() / 2];
    f.p99_us = latencies_us[std::min(latencies_us.size() - 1, latencies_us.size() * 99 / 100)];
  }
  return f;
}

Figures Median(std::vector<Figures> runs) {
  std::sort(runs.begin(), runs.end(),
            [](const Figures& a, const Figures& b) { return a.ops_per_s < b.ops_per_s; });
  return runs[runs.size() / 2];
}

}  // namespace

Figures ClosedLoop(int in_flight, double seconds, const IssueFn& issue, int64_t first) {
  absl::Mutex mu;
  std::vector<double> latencies;
  latencies.reserve(1 << 20);
  int64_t next = first, outstanding = 0, errors = 0;
  bool stopping = false;
  const auto start = SteadyClock::now();
  const auto end = After(seconds);
  std::function<void()> launch;
  launch = [&] {
    int64_t i;
    {
      absl::MutexLock lock(&mu);
      if (stopping || SteadyClock::now() >= end) {
        stopping = true;
        return;
      }
      i = next++;
      ++outstanding;
    }
    const auto began = SteadyClock::now();
    issue(i, [&, began](bool ok) {
      double us = std::chrono::duration<double, std::micro>(SteadyClock::now() - began).count();
      {
        absl::MutexLock lock(&mu);
        latencies.push_back(us);
        if (!ok) ++errors;
        --outstanding;
      }
      launch();
    });
  };
  for (int k = 0; k < in_flight; ++k) launch();
  {
    absl::MutexLock lock(&mu);
    auto idle = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return stopping && outstanding == 0; };
    mu.Await(absl::Condition(&idle));
  }
  double elapsed = std::chrono::duration<double>(SteadyClock::now() - start).count();
  return Summarize(std::move(latencies), errors, elapsed);
}

Figures Threads(int threads, double seconds, const BlockingFn& op, int64_t first) {
  std::atomic<int64_t> next{first};
  std::vector<std::vector<double>> per(threads);
  std::atomic<int64_t> errors{0};
  const auto start = SteadyClock::now();
  const auto end = After(seconds);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      while (SteadyClock::now() < end) {
        const auto began = SteadyClock::now();
        if (!op(next.fetch_add(1))) errors++;
        per[t].push_back(
            std::chrono::duration<double, std::micro>(SteadyClock::now() - began).count());
      }
    });
  }
  for (auto& thread : pool) thread.join();
  double elapsed = std::chrono::duration<double>(SteadyClock::now() - start).count();
  std::vector<double> all;
  for (auto& v : per) all.insert(all.end(), v.begin(), v.end());
  return Summarize(std::move(all), errors.load(), elapsed);
}

Figures Measure(const MeasureOptions& options, int in_flight, const IssueFn& issue,
                int64_t* warmup_ops) {
  Figures warm = ClosedLoop(in_flight, options.warmup_seconds, issue, 0);
  if (warmup_ops != nullptr) *warmup_ops = warm.ops;
  std::vector<Figures> runs;
  for (int k = 1; k <= std::max(1, options.runs); ++k) {
    runs.push_back(ClosedLoop(in_flight, options.seconds, issue, k * kRunStride));
  }
  return Median(std::move(runs));
}

Figures MeasureBlocking(const MeasureOptions& options, int threads, const BlockingFn& op) {
  Threads(threads, options.warmup_seconds, op, 0);
  std::vector<Figures> runs;
  for (int k = 1; k <= std::max(1, options.runs); ++k) {
    runs.push_back(Threads(threads, options.seconds, op, k * kRunStride));
  }
  return Median(std::move(runs));
}

}  // namespace eonce::bench
