// One attempt of the Replayer (Replayer::Attempt): private to the replayer's own files.
#ifndef EONCE_OUTBOX_AGENT_CORE_REPLAYER_ATTEMPT_H_
#define EONCE_OUTBOX_AGENT_CORE_REPLAYER_ATTEMPT_H_

#include <cstdint>
#include <string>

#include "outbox_agent/core/replayer.h"

namespace eonce {

struct Replayer::Attempt {
  std::string command_id;
  std::string entity;
  uint64_t token = 0;
  int64_t claim_expires_ms = 0;
  bool reconcile_first = false;  // reconciled with the sidecar before anything is sent
  OutboxRecord record;  // as claimed
  Session session;      // the credential it was sent under
};

}  // namespace eonce

#endif  // EONCE_OUTBOX_AGENT_CORE_REPLAYER_ATTEMPT_H_
