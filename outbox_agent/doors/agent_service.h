// The agent's gRPC service (Enqueue, EnqueueBatch, Get, List, Watch, Stats and the
// operator calls), apart from the server's lifecycle in agent_server.cc. Every call is
// settled against the caller's tenant first, and Requeue, Drop and SetCredential need an
// operator of that tenant; Enqueue writes on gRPC's thread and answers
// from the store's committer once its fsync is done, and EnqueueBatch does so for each of
// its commands and answers once the last is durable; a Watch stream is bounded and cut
// off when it falls behind.
#ifndef EONCE_OUTBOX_AGENT_DOORS_AGENT_SERVICE_H_
#define EONCE_OUTBOX_AGENT_DOORS_AGENT_SERVICE_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "eonce/v1/agent.grpc.pb.h"
#include "outbox_agent/core/credential.h"
#include "outbox_agent/core/outbox.h"
#include "outbox_agent/store/outbox_store.h"
#include "outbox_agent/core/state_feed.h"

namespace eonce {

// `kick` wakes the replay loop after a new command; `draining` turns new Enqueues away.
std::unique_ptr<v1::Agent::CallbackService> NewAgentService(
    Outbox& outbox, OutboxStore& store, CredentialState& credential, StateFeed& feed,
    std::atomic<bool>& draining, std::function<void()> kick, std::string tenant);

}  // namespace eonce

#endif  // EONCE_OUTBOX_AGENT_DOORS_AGENT_SERVICE_H_
