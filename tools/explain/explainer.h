// Explain: one command's journey across eonce. Asks every agent, sidecar and business it
// is given what each knows of a command id or idempotency key, and merges their answers
// into one timeline ordered by time (v1::Journey, proto/eonce/v1/journey.proto) with a
// verdict: applied once, a duplicate, pending, parked, rejected, a conflict, applied more
// than once, or not found.
//
// A component that cannot be read leaves its part out and is named in Journey.unread;
// the verdict is then drawn from what was read. Only a malformed query is an error
// (INVALID_ARGUMENT, MALFORMED_QUERY).
//
// Follow-ups (a business's transactional outbox, services/inbox) are found by the ids the
// inbox derives from the command's (Inbox::FollowUpCommandId): in an agent's outbox once
// relayed, and in the effects of every shard once applied. A follow-up the relay has not
// yet pulled from the business is not seen.
#ifndef EONCE_TOOLS_EXPLAIN_EXPLAINER_H_
#define EONCE_TOOLS_EXPLAIN_EXPLAINER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "eonce/v1/journey.pb.h"
#include "tools/explain/views.h"

namespace eonce::explain {

// The most follow-ups of one command looked for (the ledger emits one).
inline constexpr int kMaxFollowUps = 4;
// The longest query: an idempotency key's limit (common/command/command.h).
inline constexpr size_t kMaxQueryBytes = 256;

struct ExplainOptions {
  std::string tenant;
  // How an operator names themselves to a sidecar in the "what to do" of a parked verdict.
  std::string resolve_hint = "sidecarctl --tenant=TENANT --operator_name=YOU";
};

absl::StatusOr<v1::Journey> Explain(const std::string& query, const ExplainOptions& options,
                                    const std::vector<AgentView*>& agents,
                                    const std::vector<ShardView*>& shards);

}  // namespace eonce::explain

#endif  // EONCE_TOOLS_EXPLAIN_EXPLAINER_H_
