// InProcessSidecar: the agent's SidecarClient calling a real Deduper in the same process,
// for component tests of agent and sidecar together without the network in between.
// Answers arrive on whatever thread the Deduper answers on (the caller's, the business's
// answer's, or the store's committer).
//
// Two switches for tests: `before_answer` runs before each Submit answer reaches the
// agent; `mismatch_accepted` makes it a sidecar whose Reconcile trusts the key alone
// (a negative control).
#ifndef EONCE_TESTS_UTIL_IN_PROCESS_SIDECAR_H_
#define EONCE_TESTS_UTIL_IN_PROCESS_SIDECAR_H_

#include <functional>
#include <optional>
#include <string>

#include "dedupe_sidecar/core/deduper.h"
#include "outbox_agent/core/sidecar_client.h"

namespace eonce::testing {

class InProcessSidecar : public SidecarClient {
 public:
  explicit InProcessSidecar(Deduper& deduper) : deduper_(deduper) {}

  void Submit(const v1::Command& command, const Session& session, int64_t deadline_ms,
              std::function<void(absl::StatusOr<v1::SubmitResponse>)> done) override {
    deduper_.Submit(CallerOf(session, deadline_ms), command,
                    [this, done = std::move(done)](absl::StatusOr<v1::SubmitResponse> answer) {
                      if (before_answer) before_answer();
                      done(std::move(answer));
                    });
  }

  void Reconcile(const v1::Command& command, const Session& session, int64_t deadline_ms,
                 std::function<void(absl::StatusOr<v1::ReconcileResponse>)> done) override {
    v1::ReconcileRequest request = ReconcileRequestFor(command);
    if (mismatch_accepted) {
      request.clear_expect_command_id();
      request.clear_expect_payload_sha256();
    }
    auto answer = deduper_.Reconcile(CallerOf(session, deadline_ms), request);
    if (mismatch_accepted && answer.ok()) {
      answer->set_command_id(command.command_id());
      answer->clear_payload_sha256();
    }
    done(std::move(answer));
  }

  std::optional<int64_t> RetentionMs(const std::string&) override {
    return deduper_.Info().retention_ms();
  }

  std::function<void()> before_answer;
  bool mismatch_accepted = false;

 private:
  static Caller CallerOf(const Session& session, int64_t deadline_ms) {
    Caller caller;
    caller.tenant = session.tenant;
    caller.actor = session.actor;
    caller.credential_epoch = session.epoch;
    caller.deadline_ms = deadline_ms;
    return caller;
  }
  Deduper& deduper_;
};

}  // namespace eonce::testing

#endif  // EONCE_TESTS_UTIL_IN_PROCESS_SIDECAR_H_
