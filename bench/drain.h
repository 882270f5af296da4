// eonce bench, the drain: how fast the agent empties an outbox of first-seen commands
// into the sidecar and the ledger once its credential is renewed, paired with first seen
// from a batching client (as the agent sends) measured right before and right after it:
// this VM's speed drifts within minutes.
#ifndef EONCE_BENCH_DRAIN_H_
#define EONCE_BENCH_DRAIN_H_

#include "bench/loops.h"
#include "eonce/v1/agent.grpc.pb.h"
#include "eonce/v1/sidecar.grpc.pb.h"
#include "outbox_agent/doors/agent_server.h"

namespace eonce::bench {

// Fills the outbox through EnqueueBatch calls for 3 x measure.seconds (unmeasured), for a
// drain measured alone (--only=drain). The agent's credential must be revoked meanwhile.
void FillOutbox(v1::Agent::Stub& agent, const MeasureOptions& measure, int accounts);

// Renews the credential (epoch 2), waits (at most 10 minutes) until every QUEUED record is
// ACKED and gives the drain's figures, its paired limit and ratio set.
Figures MeasureDrain(AgentServer& agent, v1::Sidecar::Stub& sidecar,
                     const MeasureOptions& measure, int accounts);

}  // namespace eonce::bench

#endif  // EONCE_BENCH_DRAIN_H_
