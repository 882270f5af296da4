#include "tests/sim/config.h"

namespace eonce::sim::internal {

Config DrawConfig(Random& r, const SimOptions& options) {
  Config c;
  c.legacy = !options.inbox_business &&
             (options.disable_sidecar_dedupe || options.legacy_claims_inbox ||
              options.skip_record_copy || r.Chance(0.1));
  c.accounts = 2 + static_cast<int>(r.Uniform(4));
  c.transfers = 6 + static_cast<int>(r.Uniform(20));
  for (int p = 0; p < kFaultPoints; ++p) {
    bool armed = options.harsh || r.Chance(0.35);
    c.fault_probability[p] = armed ? (options.harsh ? 0.08 : 0.02 + 0.1 * (r.Uniform(100) / 100.0)) : 0;
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
    int64_t start = static_cast<int64_t>(r.Uniform(kFaultPhaseMs - 3000));
    c.partitions.emplace_back(start, start + 200 + static_cast<int64_t>(r.Uniform(2500)));
  }
  c.revoke = r.Chance(0.3);
  c.revoke_at_ms = 500 + static_cast<int64_t>(r.Uniform(8000));
  c.revoke_for_ms = 100 + static_cast<int64_t>(r.Uniform(3000));
  return c;
}

}  // namespace eonce::sim::internal
