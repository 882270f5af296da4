#include "bench/loops.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <sys/resource.h>
#include <time.h>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace eonce::bench {
namespace {

using SteadyClock = std::chrono::steady_clock;

SteadyClock::time_point After(double seconds) {
  return SteadyClock::now() + std::chrono::duration_cast<SteadyClock::duration>(
                                  std::chrono::duration<double>(seconds));
}

Figures Summarize(std::vector<double> latencies_us, int64_t errors, double elapsed_s,
                  double cpu_us, int64_t switches) {
  Figures f;
  f.ops = static_cast<int64_t>(latencies_us.size());
  f.errors = errors;
  f.ops_per_s = elapsed_s > 0 ? f.ops / elapsed_s : 0;
  f.cpu_us_per_op = f.ops > 0 ? cpu_us / f.ops : 0;
  f.switches_per_op = f.ops > 0 ? static_cast<double>(switches) / f.ops : 0;
  std::sort(latencies_us.begin(), latencies_us.end());
  if (!latencies_us.empty()) {
    f.p50_us = latencies_us[latencies_us.size() / 2];
    f.p99_us = latencies_us[std::min(latencies_us.size() - 1, latencies_us.size() * 99 / 100)];
  }
  return f;
}

double MedianOf(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

}  // namespace

Figures Median(std::vector<Figures> runs) {
  if (runs.empty()) return Figures();
  std::sort(runs.begin(), runs.end(),
            [](const Figures& a, const Figures& b) { return a.ops_per_s < b.ops_per_s; });
  return runs[runs.size() / 2];
}

double ProcessCpuUs() {
  timespec now{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
  return now.tv_sec * 1e6 + now.tv_nsec / 1e3;
}

int64_t ProcessSwitches() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_nvcsw) + static_cast<int64_t>(usage.ru_nivcsw);
}

MachineTicks ParseMachineTicks(const std::string& proc_stat) {
  std::istringstream in(proc_stat);
  std::string label;
  in >> label;
  if (label != "cpu") return MachineTicks();
  // user nice system idle iowait irq softirq steal; guest time is counted in user.
  uint64_t fields[8] = {};
  for (uint64_t& field : fields) {
    if (!(in >> field)) return MachineTicks();
  }
  MachineTicks ticks;
  for (uint64_t field : fields) ticks.total += field;
  ticks.steal = fields[7];
  return ticks;
}

int64_t ParseProcessCpuTicks(const std::string& proc_pid_stat) {
  const size_t end_of_name = proc_pid_stat.rfind(')');
  if (end_of_name == std::string::npos) return -1;
  // After the name: state (field 3) ... utime (14), stime (15).
  std::istringstream in(proc_pid_stat.substr(end_of_name + 1));
  std::string field;
  for (int k = 3; k <= 13; ++k) {
    if (!(in >> field)) return -1;
  }
  int64_t utime = 0, stime = 0;
  if (!(in >> utime >> stime) || utime < 0 || stime < 0) return -1;
  return utime + stime;
}

int64_t ReadProcessCpuTicks(int pid) {
  std::ifstream file("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(file, line)) return -1;
  return ParseProcessCpuTicks(line);
}

MachineTicks ReadMachineTicks() {
  std::ifstream file("/proc/stat");
  std::string line;
  std::getline(file, line);
  return ParseMachineTicks(line);
}

double StealPct(const MachineTicks& before, const MachineTicks& after) {
  if (after.total <= before.total || after.steal < before.steal) return 0;
  return 100.0 * static_cast<double>(after.steal - before.steal) /
         static_cast<double>(after.total - before.total);
}

namespace {

// A closed loop's state, shared with the calls in flight: an answer may arrive (and try to
// launch the next call) after the loop has returned, so nothing it touches may live on
// the loop's stack.
struct Loop {
  absl::Mutex mu;
  std::vector<double> latencies ABSL_GUARDED_BY(mu);
  int64_t next ABSL_GUARDED_BY(mu) = 0;
  int64_t outstanding ABSL_GUARDED_BY(mu) = 0;
  int64_t errors ABSL_GUARDED_BY(mu) = 0;
  bool stopping ABSL_GUARDED_BY(mu) = false;
  SteadyClock::time_point end;
  const IssueFn* issue = nullptr;  // valid until `stopping` (the loop waits for that)
};

// Starts the loop's next call, unless its time is up.
void Launch(const std::shared_ptr<Loop>& loop) {
  int64_t i;
  {
    absl::MutexLock lock(&loop->mu);
    if (loop->stopping || SteadyClock::now() >= loop->end) {
      loop->stopping = true;
      return;
    }
    i = loop->next++;
    ++loop->outstanding;
  }
  const auto began = SteadyClock::now();
  (*loop->issue)(i, [loop, began](bool ok) {
    double us = std::chrono::duration<double, std::micro>(SteadyClock::now() - began).count();
    {
      absl::MutexLock lock(&loop->mu);
      loop->latencies.push_back(us);
      if (!ok) ++loop->errors;
      --loop->outstanding;
    }
    Launch(loop);
  });
}

}  // namespace

Figures ClosedLoop(int in_flight, double seconds, const IssueFn& issue, int64_t first) {
  auto loop = std::make_shared<Loop>();
  {
    absl::MutexLock lock(&loop->mu);
    loop->latencies.reserve(1 << 20);
    loop->next = first;
  }
  loop->end = After(seconds);
  loop->issue = &issue;
  const RunStart run;
  const auto start = SteadyClock::now();
  for (int k = 0; k < in_flight; ++k) Launch(loop);
  std::vector<double> latencies;
  int64_t errors = 0;
  {
    absl::MutexLock lock(&loop->mu);
    auto idle = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(loop->mu) {
      return loop->stopping && loop->outstanding == 0;
    };
    loop->mu.Await(absl::Condition(&idle));
    latencies = std::move(loop->latencies);
    errors = loop->errors;
  }
  double elapsed = std::chrono::duration<double>(SteadyClock::now() - start).count();
  Figures f =
      Summarize(std::move(latencies), errors, elapsed, run.CpuUsSince(), run.SwitchesSince());
  f.steal_pct = run.StealPctSince();
  return f;
}

Figures Threads(int threads, double seconds, const BlockingFn& op, int64_t first) {
  std::atomic<int64_t> next{first};
  std::vector<std::vector<double>> per(threads);
  std::atomic<int64_t> errors{0};
  const RunStart run;
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
  const double cpu_us = run.CpuUsSince();
  const int64_t switches = run.SwitchesSince();
  double elapsed = std::chrono::duration<double>(SteadyClock::now() - start).count();
  std::vector<double> all;
  for (auto& v : per) all.insert(all.end(), v.begin(), v.end());
  Figures f = Summarize(std::move(all), errors.load(), elapsed, cpu_us, switches);
  f.steal_pct = run.StealPctSince();
  return f;
}

Figures Measure(const MeasureOptions& options, int in_flight, const IssueFn& issue,
                int64_t* warmup_ops) {
  return MeasurePaired(options, in_flight, issue, /*limit=*/nullptr, warmup_ops);
}

namespace {

// `runs` pairs after the warm-up: one run of the limit (and of the reference), then one
// run of the path; the path's median run with the pairs' median ratios.
Figures Paired(const MeasureOptions& options, const LimitRunFn& path, const LimitRunFn& limit,
               const LimitRunFn& reference) {
  std::vector<Figures> runs;
  std::vector<double> ratios, limits, reference_ratios, references;
  for (int k = 1; k <= std::max(1, options.runs); ++k) {
    const Figures limit_run = limit ? limit(k * kRunStride) : Figures();
    const Figures reference_run = reference ? reference(k * kRunStride) : Figures();
    runs.push_back(path(k * kRunStride));
    const double rate = runs.back().ops_per_s;
    if (limit_run.ops_per_s > 0) {
      ratios.push_back(rate / limit_run.ops_per_s);
      limits.push_back(limit_run.ops_per_s);
    }
    if (reference_run.ops_per_s > 0) {
      reference_ratios.push_back(rate / reference_run.ops_per_s);
      references.push_back(reference_run.ops_per_s);
    }
  }
  Figures median = Median(std::move(runs));
  if (!ratios.empty()) {
    median.paired_ratio_min = *std::min_element(ratios.begin(), ratios.end());
    median.paired_ratio_max = *std::max_element(ratios.begin(), ratios.end());
  }
  if (!reference_ratios.empty()) {
    median.paired_reference_ratio_min =
        *std::min_element(reference_ratios.begin(), reference_ratios.end());
    median.paired_reference_ratio_max =
        *std::max_element(reference_ratios.begin(), reference_ratios.end());
  }
  median.paired_reference_ops_per_s = MedianOf(std::move(references));
  median.paired_ratio = MedianOf(std::move(ratios));
  median.paired_limit_ops_per_s = MedianOf(std::move(limits));
  median.paired_reference_ratio = MedianOf(std::move(reference_ratios));
  return median;
}

}  // namespace

Figures MeasurePaired(const MeasureOptions& options, int in_flight, const IssueFn& issue,
                      const LimitRunFn& limit, int64_t* warmup_ops,
                      const LimitRunFn& reference) {
  Figures warm = ClosedLoop(in_flight, options.warmup_seconds, issue, 0);
  if (warmup_ops != nullptr) *warmup_ops = warm.ops;
  return Paired(
      options,
      [&](int64_t first) { return ClosedLoop(in_flight, options.seconds, issue, first); },
      limit, reference);
}

Figures MeasureBlocking(const MeasureOptions& options, int threads, const BlockingFn& op,
                        const LimitRunFn& limit) {
  Threads(threads, options.warmup_seconds, op, 0);
  return Paired(
      options, [&](int64_t first) { return Threads(threads, options.seconds, op, first); },
      limit, nullptr);
}

}  // namespace eonce::bench
