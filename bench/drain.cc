#include "bench/drain.h"

#include <chrono>
#include <functional>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "bench/commands.h"
#include "common/base/clock.h"
#include "outbox_agent/client/enqueue_batcher.h"

namespace eonce::bench {

void FillOutbox(v1::Agent::Stub& agent, const MeasureOptions& measure, int accounts) {
  EnqueueBatcher::Options options = EnqueueBatcher::DefaultOptions();
  options.max_calls = 2;
  EnqueueBatcher batcher(options, agent, RealClock::Get());
  ClosedLoop(64, 3 * measure.seconds, [&](int64_t i, std::function<void(bool)> done) {
    v1::Command c = TransferCommand(absl::StrCat("enq-drain-", i), accounts, i);
    c.clear_idempotency_key();
    c.clear_payload_hash();
    batcher.Enqueue(std::move(c), /*deadline_ms=*/0,
                    [done](EnqueueBatcher::Answer answer) { done(answer.ok()); });
  });
}

Figures MeasureDrain(AgentServer& agent, v1::Sidecar::Stub& sidecar,
                     const MeasureOptions& measure, int accounts) {
  using Clock = std::chrono::steady_clock;
  const int64_t enqueued = agent.store().CountsByState()[v1::QUEUED];
  BatchedSubmitter batched(sidecar);
  auto first_seen_run = [&](const char* prefix) {
    return ClosedLoop(64, measure.seconds, [&](int64_t i, std::function<void(bool)> done) {
      batched.Submit(TransferCommand(absl::StrCat(prefix, i), accounts, i), v1::APPLIED,
                     std::move(done));
    }).ops_per_s;
  };
  const double first_seen_before = first_seen_run("fs-before-drain-");
  auto drain_start = Clock::now();
  const RunStart drain_run;
  agent.credential().Set(2, false).IgnoreError();
  agent.Kick();
  int64_t acked = 0;
  for (int i = 0; i < 6000; ++i) {  // at most 10 minutes
    acked = agent.store().CountsByState()[v1::ACKED];
    if (acked >= enqueued) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  double drain_s = std::chrono::duration<double>(Clock::now() - drain_start).count();
  Figures drain;
  drain.ops = acked;
  drain.ops_per_s = acked / drain_s;
  drain.cpu_us_per_op = acked > 0 ? drain_run.CpuUsSince() / acked : 0;
  drain.switches_per_op = acked > 0 ? static_cast<double>(drain_run.SwitchesSince()) / acked : 0;
  drain.steal_pct = drain_run.StealPctSince();
  const double first_seen_around = (first_seen_before + first_seen_run("fs-after-drain-")) / 2;
  drain.paired_limit_ops_per_s = first_seen_around;
  drain.paired_ratio = first_seen_around > 0 ? drain.ops_per_s / first_seen_around : 0;
  return drain;
}

}  // namespace eonce::bench
