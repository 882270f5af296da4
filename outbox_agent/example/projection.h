// Projection: a producer's local view built from acks, through an idempotent reducer.
//
// The agent's Watch only says "something changed"; the producer reads the record (the
// store says what is true) and hands it to Apply. Apply records each acked command once,
// keyed by command id, so a replayed or duplicated ack changes nothing. Counters are
// derived from the applied set on every read, never incremented or decremented, so they
// cannot drift. Not thread-safe: one producer thread owns it.
#ifndef EONCE_OUTBOX_AGENT_EXAMPLE_PROJECTION_H_
#define EONCE_OUTBOX_AGENT_EXAMPLE_PROJECTION_H_

#include <map>
#include <string>

#include "eonce/v1/agent.pb.h"

namespace eonce {

struct TransferView {
  std::string from;
  std::string to;
  int64_t amount = 0;
  int64_t from_balance_after = 0;
};

class Projection {
 public:
  // Returns true if the record changed the view (its first ack); false for a repeat, a
  // record that is not acked, or one that is not a transfer.
  bool Apply(const v1::OutboxRecord& record);

  // Derived on every call from what was applied.
  int64_t transfers() const { return static_cast<int64_t>(applied_.size()); }
  int64_t amount_moved() const;
  const std::map<std::string, TransferView>& applied() const { return applied_; }

 private:
  std::map<std::string, TransferView> applied_;
};

}  // namespace eonce

#endif  // EONCE_OUTBOX_AGENT_EXAMPLE_PROJECTION_H_
