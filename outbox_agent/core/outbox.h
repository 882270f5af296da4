// Outbox: the producer-facing side of the agent: turns "the user asked for this" into a
// durable intent.
//
// Enqueue completes the command (a command id if the producer gave none, the derived
// idempotency key, the payload hash, the time and the credential epoch) and answers only
// once it is synced to the outbox. The same command id with the same payload returns the
// existing record; with another payload it is ALREADY_EXISTS. The command's trace context
// is kept with it but is no part of that decision: a duplicate with another traceparent
// returns the existing record, trace and all. A malformed traceparent is dropped and
// counted, never refused. Thread-safe.
#ifndef EONCE_OUTBOX_AGENT_CORE_OUTBOX_H_
#define EONCE_OUTBOX_AGENT_CORE_OUTBOX_H_

#include <atomic>
#include <cstdint>
#include <functional>

#include "absl/status/statusor.h"
#include "common/base/clock.h"
#include "common/command/command.h"
#include "common/base/fault.h"
#include "common/base/random.h"
#include "eonce/v1/agent.pb.h"
#include "outbox_agent/core/credential.h"
#include "outbox_agent/core/send_outlook.h"
#include "outbox_agent/store/outbox_store.h"
#include "outbox_agent/core/state_feed.h"

namespace eonce {

inline constexpr uint32_t kSchemaVersion = 1;

class Outbox {
 public:
  Outbox(OutboxStore& store, CredentialState& credential, Clock& clock, Random& random,
         CommandLimits limits, StateFeed* feed = nullptr, FaultInjector* faults = nullptr,
         const SendOutlook* outlook = nullptr)
      : store_(store),
        credential_(credential),
        clock_(clock),
        random_(random),
        limits_(limits),
        feed_(feed),
        faults_(faults),
        outlook_(outlook) {}

  // Calls `done` once the record is durable: at once, or from the store's committer thread
  // after the fsync that serves every Enqueue waiting then. Nothing in it waits for a disk.
  // A command that heads its entity's lane while `outlook` says it would be sent at once
  // is written marked as maybe sent (ever_sent), so its first claim needs no sync.
  using EnqueueDone = std::function<void(absl::StatusOr<v1::EnqueueResponse>)>;
  void Enqueue(v1::Command command, EnqueueDone done);
  // The same, returning when `done` would be called (tests, tools).
  absl::StatusOr<v1::EnqueueResponse> Enqueue(v1::Command command);

  // Malformed trace context dropped from enqueued commands (common/command/trace_context.h),
  // by what was dropped.
  int64_t traceparents_dropped() const { return traceparents_dropped_.load(); }
  int64_t tracestates_dropped() const { return tracestates_dropped_.load(); }

  // Operator calls. Requeue keeps the command id and starts its attempts afresh.
  absl::StatusOr<OutboxRecord> Requeue(const std::string& command_id);
  absl::StatusOr<OutboxRecord> Drop(const std::string& command_id, const std::string& why);

 private:
  void Publish(const OutboxRecord& record);
  // Fills in what the producer may leave out, and checks the result.
  absl::Status Complete(v1::Command* command);

  OutboxStore& store_;
  CredentialState& credential_;
  Clock& clock_;
  Random& random_;
  const CommandLimits limits_;
  StateFeed* const feed_;
  FaultInjector* const faults_;
  const SendOutlook* const outlook_;
  std::atomic<int64_t> traceparents_dropped_{0};
  std::atomic<int64_t> tracestates_dropped_{0};
};

}  // namespace eonce

#endif  // EONCE_OUTBOX_AGENT_CORE_OUTBOX_H_
