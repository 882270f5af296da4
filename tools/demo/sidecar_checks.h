// What the demo checks straight at the sidecars, around the agent: finished commands sent
// again (answered from the records of the shard that owns each now), and the unknown
// outcomes parked for an operator.
#ifndef EONCE_TOOLS_DEMO_SIDECAR_CHECKS_H_
#define EONCE_TOOLS_DEMO_SIDECAR_CHECKS_H_

#include <cstdint>
#include <map>
#include <string>

#include "eonce/v1/agent.pb.h"
#include "tools/demo/demo_stack.h"

namespace eonce::demo {

struct SidecarReplays {
  int64_t attempts = 0;  // finished commands sent again, straight to the sidecar
  int64_t replayed = 0;  // answered from the sidecar's records, byte for byte
};

// Sends up to `limit` acknowledged ledger commands again, straight to the sidecar that
// owns each one's slot, as a second device or a restored backup would: the sidecar
// answers from its records.
SidecarReplays ReplayAtTheSidecar(const Stack& stack,
                                  const std::map<std::string, v1::OutboxRecord>& records,
                                  int limit);

// Unknown outcomes parked for an operator, across every sidecar.
int64_t ParkedOutcomes(const Stack& stack);

}  // namespace eonce::demo

#endif  // EONCE_TOOLS_DEMO_SIDECAR_CHECKS_H_
