// FakeSidecarClient: a scripted sidecar for unit tests of the Replayer.
//
// Submit answers from `submit_answers` (front first) or, when that is empty, APPLIED with
// a fence that echoes the session; with `hold` set, answers wait for Release.
// Reconcile answers from `reconcile_answers` or NOT_SEEN. SubmitMany is recorded (rounds())
// and taken one Submit each.
#ifndef EONCE_OUTBOX_AGENT_CORE_FAKE_SIDECAR_CLIENT_H_
#define EONCE_OUTBOX_AGENT_CORE_FAKE_SIDECAR_CLIENT_H_

#include <deque>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/base/status.h"
#include "outbox_agent/core/sidecar_client.h"

namespace eonce {

class FakeSidecarClient : public SidecarClient {
 public:
  using SubmitDone = std::function<void(absl::StatusOr<v1::SubmitResponse>)>;

  void Submit(const v1::Command& command, const Session& session, int64_t /*deadline_ms*/,
              SubmitDone done) override {
    absl::StatusOr<v1::SubmitResponse> answer;
    {
      absl::MutexLock lock(&mu_);
      submitted_.push_back(command.command_id());
      submitted_requests_.push_back(command.request());
      submitted_traces_.push_back(command.trace());
      sessions_.push_back(session);
      if (hold_) {
        held_.push_back(std::move(done));
        held_sessions_.push_back(session);
        held_ids_.push_back(command.command_id());
        return;
      }
      if (command.entity().id() == failing_entity_) {
        answer = Error(absl::StatusCode::kUnavailable, "UPSTREAM_UNAVAILABLE", "scripted");
      } else if (!submit_answers_.empty()) {
        answer = submit_answers_.front();
        submit_answers_.pop_front();
      } else {
        answer = Applied(session, command.command_id(), "ok:" + command.command_id());
      }
    }
    done(std::move(answer));
  }

  // Records how many Submits came together, then takes each as Submit does.
  void SubmitMany(const Session& session, std::vector<SubmitCall> calls) override {
    {
      absl::MutexLock lock(&mu_);
      rounds_.push_back(static_cast<int>(calls.size()));
    }
    SidecarClient::SubmitMany(session, std::move(calls));
  }

  void Reconcile(const v1::Command& command, const Session& /*session*/, int64_t /*deadline_ms*/,
                 std::function<void(absl::StatusOr<v1::ReconcileResponse>)> done) override {
    absl::StatusOr<v1::ReconcileResponse> answer;
    {
      absl::MutexLock lock(&mu_);
      reconciled_.push_back(command.command_id());
      reconcile_requests_.push_back(ReconcileRequestFor(command));
      reconciled_traces_.push_back(command.trace());
      if (!reconcile_answers_.empty()) {
        answer = reconcile_answers_.front();
        reconcile_answers_.pop_front();
      } else {
        v1::ReconcileResponse not_seen;
        not_seen.set_state(v1::RECORD_NOT_SEEN);
        answer = not_seen;
      }
    }
    done(std::move(answer));
  }

  std::optional<int64_t> RetentionMs(const std::string& target_method) override {
    absl::MutexLock lock(&mu_);
    if (unknown_retention_.count(target_method) > 0) return std::nullopt;
    return retention_ms_;
  }
  // A route whose sidecar has not told its retention yet.
  void set_retention_unknown(const std::string& target_method) {
    absl::MutexLock l(&mu_);
    unknown_retention_.insert(target_method);
  }

  static v1::SubmitResponse Applied(const Session& session, const std::string& command_id,
                                    const std::string& response) {
    v1::SubmitResponse r;
    r.set_disposition(v1::APPLIED);
    r.mutable_result()->set_response(response);
    r.mutable_fence()->set_tenant(session.tenant);
    r.mutable_fence()->set_credential_epoch(session.epoch);
    r.mutable_fence()->set_command_id(command_id);
    return r;
  }

  // Answers the oldest held Submit; `answer` null means the default APPLIED answer.
  void Release(std::optional<absl::StatusOr<v1::SubmitResponse>> answer = std::nullopt) {
    SubmitDone done;
    absl::StatusOr<v1::SubmitResponse> out;
    {
      absl::MutexLock lock(&mu_);
      done = std::move(held_.front());
      out = answer.has_value()
                ? *answer
                : Applied(held_sessions_.front(), held_ids_.front(), "ok:" + held_ids_.front());
      held_.pop_front();
      held_sessions_.pop_front();
      held_ids_.pop_front();
    }
    done(std::move(out));
  }

  void AnswerSubmit(absl::StatusOr<v1::SubmitResponse> a) {
    absl::MutexLock l(&mu_);
    submit_answers_.push_back(std::move(a));
  }
  void AnswerReconcile(absl::StatusOr<v1::ReconcileResponse> a) {
    absl::MutexLock l(&mu_);
    reconcile_answers_.push_back(std::move(a));
  }
  void set_failing_entity(const std::string& id) { absl::MutexLock l(&mu_); failing_entity_ = id; }
  void set_hold(bool hold) { absl::MutexLock l(&mu_); hold_ = hold; }
  void set_retention_ms(std::optional<int64_t> ms) { absl::MutexLock l(&mu_); retention_ms_ = ms; }
  std::vector<std::string> submitted() { absl::MutexLock l(&mu_); return submitted_; }
  // The request bytes of each Submit, in the order of submitted().
  std::vector<std::string> submitted_requests() {
    absl::MutexLock l(&mu_);
    return submitted_requests_;
  }
  // The trace context each Submit and Reconcile carried, in call order.
  std::vector<v1::TraceContext> submitted_traces() {
    absl::MutexLock l(&mu_);
    return submitted_traces_;
  }
  std::vector<v1::TraceContext> reconciled_traces() {
    absl::MutexLock l(&mu_);
    return reconciled_traces_;
  }
  std::vector<std::string> reconciled() { absl::MutexLock l(&mu_); return reconciled_; }
  // The size of each SubmitMany, in order.
  std::vector<int> rounds() { absl::MutexLock l(&mu_); return rounds_; }
  std::vector<v1::ReconcileRequest> reconcile_requests() {
    absl::MutexLock l(&mu_);
    return reconcile_requests_;
  }
  std::vector<std::string> held_ids() {
    absl::MutexLock l(&mu_);
    return std::vector<std::string>(held_ids_.begin(), held_ids_.end());
  }

 private:
  absl::Mutex mu_;
  bool hold_ ABSL_GUARDED_BY(mu_) = false;
  std::string failing_entity_ ABSL_GUARDED_BY(mu_);
  std::optional<int64_t> retention_ms_ ABSL_GUARDED_BY(mu_) = 7LL * 24 * 3600 * 1000;
  std::set<std::string> unknown_retention_ ABSL_GUARDED_BY(mu_);
  std::deque<absl::StatusOr<v1::SubmitResponse>> submit_answers_ ABSL_GUARDED_BY(mu_);
  std::deque<absl::StatusOr<v1::ReconcileResponse>> reconcile_answers_ ABSL_GUARDED_BY(mu_);
  std::deque<SubmitDone> held_ ABSL_GUARDED_BY(mu_);
  std::deque<Session> held_sessions_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> held_ids_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> submitted_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> submitted_requests_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::TraceContext> submitted_traces_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::TraceContext> reconciled_traces_ ABSL_GUARDED_BY(mu_);
  std::vector<Session> sessions_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> reconciled_ ABSL_GUARDED_BY(mu_);
  std::vector<int> rounds_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::ReconcileRequest> reconcile_requests_ ABSL_GUARDED_BY(mu_);
};

}  // namespace eonce

#endif  // EONCE_OUTBOX_AGENT_CORE_FAKE_SIDECAR_CLIENT_H_
