// How the Replayer treats an attempt whose record's last outcome is unknown (a lost
// answer, a restart, a worker's claim taken over): it asks the sidecar what it knows of
// the command's key before anything is sent again. A recorded outcome is applied as the
// answer, a record of another command is a conflict, and a key the sidecar has not seen
// or is still processing is sent (the sidecar dedupes). The claims that lead here are in
// replayer.cc, the moves that follow in replayer_answers.cc.
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status.h"
#include "outbox_agent/core/replayer.h"
#include "outbox_agent/core/replayer_attempt.h"

namespace eonce {
namespace {

// A record found under the command's key that belongs to another command or payload is a
// conflict: its outcome is not this command's.
absl::Status CheckOwner(const v1::ReconcileResponse& answer, const v1::Command& command) {
  if (answer.state() == v1::RECORD_NOT_SEEN) return absl::OkStatus();
  if (!answer.payload_sha256().empty() &&
      answer.payload_sha256() != command.payload_hash().sha256()) {
    return Error(absl::StatusCode::kAlreadyExists, "IDEMPOTENCY_CONFLICT",
                 "the key's record holds another payload");
  }
  if (answer.command_id() != command.command_id()) {
    return Error(absl::StatusCode::kAlreadyExists, "KEY_REUSED",
                 absl::StrCat("the key's record belongs to command '", answer.command_id(), "'"));
  }
  return absl::OkStatus();
}

}  // namespace

void Replayer::Reconcile(std::shared_ptr<Attempt> attempt) {
  stats_.reconciles++;
  int64_t deadline = CallDeadline(*attempt);
  client_.Reconcile(
      attempt->record.command(), attempt->session, deadline,
      [this, attempt](absl::StatusOr<v1::ReconcileResponse> answer) {
        if (!answer.ok()) {
          OnFailure(attempt, answer.status());
          return;
        }
        // The sidecar checks the owner of the key too; this check also holds against
        // one that does not.
        if (absl::Status owner = CheckOwner(*answer, attempt->record.command()); !owner.ok()) {
          OnFailure(attempt, owner);
          return;
        }
        switch (answer->state()) {
          case v1::RECORD_COMMITTED:
          case v1::RECORD_FAILED: {
            v1::SubmitResponse response;
            response.set_disposition(v1::REPLAYED);
            *response.mutable_result() = answer->result();
            *response.mutable_replay() = answer->replay();
            response.mutable_replay()->set_replayed(true);
            // The fence is the session we asked under: Reconcile answers within it.
            response.mutable_fence()->set_tenant(attempt->session.tenant);
            response.mutable_fence()->set_credential_epoch(attempt->session.epoch);
            response.mutable_fence()->set_command_id(attempt->command_id);
            OnAnswer(attempt, std::move(response));
            return;
          }
          case v1::RECORD_EXPIRED:
            OnFailure(attempt, Error(absl::StatusCode::kFailedPrecondition, "RECORD_EXPIRED",
                                     "the sidecar's record is past retention"));
            return;
          case v1::RECORD_UNKNOWN_PARKED:
            OnFailure(attempt, Error(absl::StatusCode::kFailedPrecondition, "OUTCOME_UNKNOWN",
                                     "parked at the sidecar for an operator"));
            return;
          default:  // NOT_SEEN or PROCESSING: sending is safe; the sidecar dedupes
            Send(attempt);
            return;
        }
      });
}

}  // namespace eonce
