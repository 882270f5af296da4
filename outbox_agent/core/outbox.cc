#include "outbox_agent/core/outbox.h"

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/base/log.h"
#include "common/base/status.h"
#include "common/command/trace_context.h"

namespace eonce {

void Outbox::Publish(const OutboxRecord& record) {
  if (feed_ != nullptr) feed_->Announce(record);
}

void Outbox::Enqueue(v1::Command command, EnqueueDone done) {
  absl::Status valid = Complete(&command);
  if (valid.ok()) valid = HitFault(faults_, FaultPoint::kBeforeOutboxWrite);
  if (!valid.ok()) {
    done(valid);
    return;
  }
  // Checked and placed in its lane here; written by the store's committer with the other
  // inserts of its group, and answered once durable.
  const bool sends_at_once = outlook_ != nullptr && outlook_->SendsAtOnce(command);
  store_.InsertWhenDurable(command, [this, done = std::move(done)](
                                        absl::StatusOr<OutboxStore::Inserted> inserted) {
    absl::Status durable = inserted.status();
    if (durable.ok() && inserted->second) {
      // Announced, then due: a watcher hears of QUEUED before any attempt's state.
      Publish(inserted->first);
      store_.MarkDurable(inserted->first.command().command_id());
    }
    if (durable.ok()) durable = HitFault(faults_, FaultPoint::kAfterOutboxWrite);
    if (!durable.ok()) {
      done(durable);
      return;
    }
    v1::EnqueueResponse response;
    *response.mutable_record() = std::move(inserted->first);
    response.set_created(inserted->second);
    done(std::move(response));
  }, sends_at_once);
}

absl::StatusOr<v1::EnqueueResponse> Outbox::Enqueue(v1::Command command) {
  absl::Notification answered;
  absl::StatusOr<v1::EnqueueResponse> result = absl::InternalError("no answer");
  Enqueue(std::move(command), [&](absl::StatusOr<v1::EnqueueResponse> r) {
    result = std::move(r);
    answered.Notify();
  });
  answered.WaitForNotification();
  return result;
}

absl::Status Outbox::Complete(v1::Command* command) {
  EONCE_RETURN_IF_ERROR(ValidateProducerCommand(*command, limits_));
  Session session = credential_.session();
  if (command->tenant().empty()) command->set_tenant(session.tenant);
  if (command->tenant() != session.tenant) {
    return Error(absl::StatusCode::kPermissionDenied, "TENANT_MISMATCH",
                 absl::StrCat("this agent serves tenant ", session.tenant));
  }
  if (command->actor().empty()) command->set_actor(session.actor);
  if (command->command_id().empty()) command->set_command_id(random_.HexId());
  if (command->idempotency_key().empty()) {
    command->set_idempotency_key(DeriveIdempotencyKey(*command));
  }
  if (command->idempotency_key().size() > limits_.max_key_bytes) {
    return Error(absl::StatusCode::kInvalidArgument, "INVALID_FIELD",
                 absl::StrCat("idempotency_key: the derived key is longer than ",
                              limits_.max_key_bytes, " bytes; supply a shorter one"));
  }
  // Not part of the hash, the key or the duplicate check (outbox_store compares the hash
  // and method only): the trace a command arrived with never makes it another command.
  TraceDrops drops = SanitizeTrace(command->mutable_trace());
  if (drops.traceparent) {
    traceparents_dropped_.fetch_add(1, std::memory_order_relaxed);
    LogWarn("malformed traceparent dropped", {{"command_id", command->command_id()}});
  }
  if (drops.tracestate) {
    tracestates_dropped_.fetch_add(1, std::memory_order_relaxed);
    LogWarn("malformed tracestate dropped",
            WithTrace({{"command_id", command->command_id()}}, command->trace()));
  }
  FillPayloadHash(command);
  command->set_created_at_ms(clock_.NowMs());
  command->set_credential_epoch(session.epoch);
  command->set_schema_version(kSchemaVersion);
  return absl::OkStatus();
}

absl::StatusOr<OutboxRecord> Outbox::Requeue(const std::string& command_id) {
  EONCE_ASSIGN_OR_RETURN(
      auto record,
      store_.Mutate(command_id, "requeued by an operator",
                    [&](OutboxRecord* r) {
                      switch (r->state()) {
                        case v1::DEAD_LETTERED:
                        case v1::EXPIRED:
                        case v1::REJECTED:
                        case v1::UNKNOWN:
                          break;
                        default:
                          return Error(absl::StatusCode::kFailedPrecondition, "NOT_REQUEUEABLE",
                                       absl::StrCat("a record in state ",
                                                    v1::OutboxState_Name(r->state()),
                                                    " cannot be requeued"));
                      }
                      // An unknown outcome must still be reconciled before resending.
                      if (r->state() != v1::UNKNOWN) r->set_state(v1::QUEUED);
                      r->set_attempt(0);
                      r->set_unclassified_failures(0);
                      r->set_next_attempt_at_ms(clock_.NowMs());
                      return absl::OkStatus();
                    },
                    /*sync=*/true));
  LogInfo("requeued", WithTrace({{"command_id", command_id},
                                 {"key", record.command().idempotency_key()},
                                 {"tenant", record.command().tenant()},
                                 {"operation", record.command().target_method()}},
                                record.command().trace()));
  Publish(record);
  return record;
}

absl::StatusOr<OutboxRecord> Outbox::Drop(const std::string& command_id, const std::string& why) {
  EONCE_ASSIGN_OR_RETURN(
      auto record,
      store_.Mutate(command_id, absl::StrCat("dropped by an operator: ", why.substr(0, 200)),
                    [&](OutboxRecord* r) {
                      if (r->state() == v1::ACKED || r->state() == v1::DROPPED) {
                        return Error(absl::StatusCode::kFailedPrecondition, "NOT_DROPPABLE",
                                     "an acked or dropped record cannot be dropped");
                      }
                      r->set_state(v1::DROPPED);
                      r->clear_claim();  // a worker still sending it is fenced off
                      return absl::OkStatus();
                    },
                    /*sync=*/true));
  LogWarn("dropped", WithTrace({{"command_id", command_id},
                                {"key", record.command().idempotency_key()},
                                {"tenant", record.command().tenant()},
                                {"operation", record.command().target_method()},
                                {"why", why.substr(0, 200)}},
                               record.command().trace()));
  Publish(record);
  return record;
}

}  // namespace eonce
