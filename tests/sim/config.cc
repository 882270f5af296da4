#include "tests/sim/config.h"

#include "tests/sim/coord.h"

namespace eonce::sim::internal {

Config DrawConfig(Random& r, const SimOptions& options) {
  Config c;
  // Sharded, every shard's business keeps an inbox: its data moves with its slots, and a
  // transfer to another shard's account is a debit here and a credit there, sent as a
  // command (which needs the inbox's transactional outbox).
  c.legacy = !options.inbox_business && !options.shards &&
             (options.disable_sidecar_dedupe || options.legacy_claims_inbox || r.Chance(0.1));
  if (options.shards) c.fault_phase_ms = kShardedFaultPhaseMs;
  c.accounts = 2 + static_cast<int>(r.Uniform(4));
  c.transfers = 6 + static_cast<int>(r.Uniform(20));
  for (int p = 0; p < kFaultPoints; ++p) {
    bool armed = options.harsh || r.Chance(0.35);
    c.fault_probability[p] = armed ? (options.harsh ? 0.08 : 0.02 + 0.1 * (r.Uniform(100) / 100.0)) : 0;
    // Five processes crash at these points in a sharded world, and every crash is a
    // restart of a store: half as often.
    if (options.shards) c.fault_probability[p] /= 2;
  }
  auto link = [&](LinkFaults* l) {
    l->drop = r.Uniform(100) / 100.0 * (options.harsh ? 0.1 : 0.08);
    l->duplicate = r.Uniform(100) / 100.0 * (options.harsh ? 0.3 : 0.1);
    l->lose_answer = r.Uniform(100) / 100.0 * (options.harsh ? 0.15 : 0.08);
    l->min_delay_ms = 1;
    l->max_delay_ms = 2 + static_cast<int64_t>(r.Uniform(40));
  };
  link(&c.agent_link);
  link(&c.business_link);
  // Nothing can dedupe a copy made after the sidecar in front of a legacy business: the
  // sidecar's channel has gRPC retries off, and the deploy guide forbids a retrying proxy
  // on that hop. An inbox-mode business dedupes copies itself, so they are simulated.
  if (c.legacy) c.business_link.duplicate = 0;
  c.lose_enqueue_answer = r.Uniform(100) / 100.0 * (options.harsh ? 0.3 : 0.15);
  int partitions = static_cast<int>(r.Uniform(3));
  for (int i = 0; i < partitions; ++i) {
    int64_t start = static_cast<int64_t>(r.Uniform(c.fault_phase_ms - 3000));
    c.partitions.emplace_back(start, start + 200 + static_cast<int64_t>(r.Uniform(2500)));
  }
  if (options.shards) {
    // From its own stream, so that the draws above stay those of the unsharded worlds.
    SeededRandom s(r.Next());
    c.late_forward = s.Uniform(100) / 100.0 * (options.harsh ? 0.5 : 0.08);
    for (int shard = 0; shard < 2; ++shard) {
      c.slow_sync_ms[shard] = s.Chance(0.3) ? static_cast<int64_t>(s.Uniform(1500)) : 0;
      if (s.Chance(0.4)) {
        const int64_t start = static_cast<int64_t>(s.Uniform(c.fault_phase_ms - 4000));
        const int64_t length = 200 + static_cast<int64_t>(s.Uniform(2 * kLeaseTtlMs));
        c.store_partitions[shard].emplace_back(start, start + length);
      }
      c.clock_offset_ms[shard] = static_cast<int64_t>(s.Uniform(4001)) - 2000;
      // Within the allowance the lease leaves for drift.
      c.clock_drift[shard] = (static_cast<double>(s.Uniform(201)) - 100) / 100 * 0.009;
    }
    c.rival_mover = options.harsh ? 0.6 : 0.35;
    c.abort_move = options.harsh ? 0.2 : 0.1;
    c.down_at_flip = options.harsh ? 0.3 : 0.15;
  }
  c.revoke = r.Chance(0.3);
  c.revoke_at_ms = 500 + static_cast<int64_t>(r.Uniform(8000));
  c.revoke_for_ms = 100 + static_cast<int64_t>(r.Uniform(3000));
  return c;
}

}  // namespace eonce::sim::internal
