// The verdict of a journey: from what the agent, the sidecars and the businesses said of a
// command, the one line an operator reads first. Pure: tested on its own (verdict_test.cc).
#ifndef EONCE_TOOLS_EXPLAIN_VERDICT_H_
#define EONCE_TOOLS_EXPLAIN_VERDICT_H_

#include <optional>
#include <string>
#include <vector>

#include "eonce/v1/agent.pb.h"
#include "eonce/v1/journey.pb.h"
#include "eonce/v1/sidecar.pb.h"

namespace eonce::explain {

// What was read of one command.
struct Evidence {
  std::optional<v1::OutboxRecord> record;  // the agent's, when one holds it
  std::vector<v1::AuditEvent> audit;       // the sidecars' events of the command, by time
  bool parked = false;                     // a sidecar lists it as parked
  bool effects_read = false;               // every shard's effects could be read
  int effects = 0;                         // effects of the command found
  uint64_t effect_seq = 0;
  std::vector<v1::JourneyFollowUp> follow_ups;
  std::string resolve_hint;  // "sidecarctl --sidecar=... --tenant=... --operator_name=..."
};

struct VerdictLine {
  v1::Verdict verdict = v1::VERDICT_UNSPECIFIED;
  std::string text;
};

VerdictLine Judge(const std::string& command_id, const std::string& key, const Evidence& e);

}  // namespace eonce::explain

#endif  // EONCE_TOOLS_EXPLAIN_VERDICT_H_
