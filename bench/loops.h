// The measuring loops of eonce bench: a closed loop of N operations in flight (callback
// or blocking), and Measure, which warms up first and reports the median of several runs.
#ifndef EONCE_BENCH_LOOPS_H_
#define EONCE_BENCH_LOOPS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace eonce::bench {

struct Figures {
  double ops_per_s = 0;
  double p50_us = 0;
  double p99_us = 0;
  int64_t ops = 0;
  int64_t errors = 0;
  // The whole process's CPU time (every thread: the client loop, the servers in it) per
  // operation: steadier than a rate on a shared VM, so A/B comparisons read it first.
  double cpu_us_per_op = 0;
  // The whole process's context switches (voluntary and not) per operation: each is a
  // thread that slept and was woken, or was preempted. A count of hand-offs, it moves
  // far less with the VM's speed than the CPU time does.
  double switches_per_op = 0;
  // Set by MeasurePaired: the median over the pairs of (this run's rate / the limit's run
  // just before it), and the limit's median rate.
  double paired_ratio = 0;
  double paired_limit_ops_per_s = 0;
  // The smallest and largest of those pairs' ratios: how far the machine's noise moved it.
  double paired_ratio_min = 0;
  double paired_ratio_max = 0;
  // The same for MeasurePaired's `reference`, a second path run in each pair (the ledger
  // called directly, for the first-seen rows): the median of (this run's rate / the
  // reference's run just before it).
  double paired_reference_ratio = 0;
  double paired_reference_ratio_min = 0;
  double paired_reference_ratio_max = 0;
  double paired_reference_ops_per_s = 0;  // the reference's median rate
  // The share of the machine's CPU time, in percent, that the hypervisor gave to other
  // guests during the run (steal); a VM's limits and rates fall with it.
  double steal_pct = 0;
};

// The process's CPU time so far, in microseconds (CLOCK_PROCESS_CPUTIME_ID).
double ProcessCpuUs();
// The context switches of all of the process's threads so far (getrusage).
int64_t ProcessSwitches();

// The CPU time (user + system) of one process so far, in the kernel's clock ticks, from
// its /proc/<pid>/stat line (fields 14 and 15, counted after the ")" that ends the command
// name, which may itself hold spaces and parentheses); -1 for a line that is not one.
int64_t ParseProcessCpuTicks(const std::string& proc_pid_stat);
// The same read from /proc/<pid>/stat; -1 when the process is gone.
int64_t ReadProcessCpuTicks(int pid);

// The machine's CPU time so far, all CPUs, in the kernel's clock ticks: in all, and the
// part stolen by the hypervisor.
struct MachineTicks {
  uint64_t total = 0;
  uint64_t steal = 0;
};
// From the first line of /proc/stat ("cpu  user nice system idle iowait irq softirq
// steal ..."); zeros for a line that is not one (then no steal is reported).
MachineTicks ParseMachineTicks(const std::string& proc_stat);
MachineTicks ReadMachineTicks();
// The stolen share of the time between two readings, in percent; 0 if none passed.
double StealPct(const MachineTicks& before, const MachineTicks& after);

// Where a run began, for what it cost: the process's CPU time and context switches, and
// the share of the machine's time stolen since then.
struct RunStart {
  double cpu_us = ProcessCpuUs();
  int64_t switches = ProcessSwitches();
  MachineTicks ticks = ReadMachineTicks();
  double CpuUsSince() const { return ProcessCpuUs() - cpu_us; }
  int64_t SwitchesSince() const { return ProcessSwitches() - switches; }
  double StealPctSince() const { return StealPct(ticks, ReadMachineTicks()); }
};

// Starts operation `i` and calls `done(ok)` when it ends, on any thread.
using IssueFn = std::function<void(int64_t i, std::function<void(bool)> done)>;
// Runs operation `i` on the calling thread; true when it succeeded.
using BlockingFn = std::function<bool(int64_t i)>;

// Keeps `in_flight` operations going for `seconds`; operation numbers start at `first`.
Figures ClosedLoop(int in_flight, double seconds, const IssueFn& issue, int64_t first = 0);
// The same over `threads` threads, for blocking calls.
Figures Threads(int threads, double seconds, const BlockingFn& op, int64_t first = 0);

// The run with the median throughput; empty Figures for no runs.
Figures Median(std::vector<Figures> runs);

struct MeasureOptions {
  double warmup_seconds = 0.5;
  double seconds = 2.0;
  int runs = 3;  // the median by throughput is reported
};

// A warm-up (operations 0, 1, ... ; their count is `*warmup_ops`), then `runs` runs whose
// operation numbers start at k * kRunStride, so that no two runs share one; returns the
// run with the median throughput.
inline constexpr int64_t kRunStride = 1'000'000'000;
Figures Measure(const MeasureOptions& options, int in_flight, const IssueFn& issue,
                int64_t* warmup_ops = nullptr);

// One run of a physical limit (echo, synced puts) whose operation numbers start at `first`.
using LimitRunFn = std::function<Figures(int64_t first)>;
// Measure, for a machine whose speed drifts from minute to minute (a VM): after the
// warm-up, `runs` pairs, each one run of the limit and then one run of the path. Returns
// the path's median run with paired_ratio, the median of the pairs' ratios, so that a
// ratio compares two runs seconds apart rather than minutes. A null `limit` is Measure.
// With a `reference`, each pair also runs it between the limit and the path, and
// paired_reference_ratio is the median of the path's rate over the reference's.
Figures MeasurePaired(const MeasureOptions& options, int in_flight, const IssueFn& issue,
                      const LimitRunFn& limit, int64_t* warmup_ops = nullptr,
                      const LimitRunFn& reference = nullptr);
// Measure or MeasurePaired for blocking calls on `threads` threads.
Figures MeasureBlocking(const MeasureOptions& options, int threads, const BlockingFn& op,
                        const LimitRunFn& limit = nullptr);

}  // namespace eonce::bench

#endif  // EONCE_BENCH_LOOPS_H_
