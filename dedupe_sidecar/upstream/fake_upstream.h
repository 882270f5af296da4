// FakeUpstream: a scripted business service for unit tests of the Deduper.
//
// Each Forward is recorded; it is answered at once by `next_reply`, or held (when
// `hold` is set) until the test calls Release. QueryOutcome answers `outcome`.
#ifndef EONCE_DEDUPE_SIDECAR_UPSTREAM_FAKE_UPSTREAM_H_
#define EONCE_DEDUPE_SIDECAR_UPSTREAM_FAKE_UPSTREAM_H_

#include <deque>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "dedupe_sidecar/upstream/upstream.h"

namespace eonce {

class FakeUpstream : public Upstream {
 public:
  void Forward(ForwardCall call, std::function<void(ForwardReply)> done) override {
    ForwardReply reply;
    {
      absl::MutexLock lock(&mu_);
      calls_.push_back(call);
      if (hold_) {
        held_.push_back(std::move(done));
        return;
      }
      reply = next_reply_;
    }
    done(reply);
  }

  void QueryOutcome(const std::string& /*tenant*/, const std::string& command_id,
                    int64_t /*deadline_ms*/,
                    std::function<void(absl::StatusOr<v1::QueryOutcomeResponse>)> done) override {
    absl::StatusOr<v1::QueryOutcomeResponse> outcome;
    {
      absl::MutexLock lock(&mu_);
      queried_.push_back(command_id);
      outcome = outcome_;
    }
    done(outcome);
  }

  bool Reachable() override {
    absl::MutexLock lock(&mu_);
    return reachable_;
  }

  // Answers the oldest held forward.
  void Release(ForwardReply reply) { TakeHeld(/*newest=*/false)(std::move(reply)); }
  // Answers the newest held forward.
  void ReleaseNewest(ForwardReply reply) { TakeHeld(/*newest=*/true)(std::move(reply)); }

  static ForwardReply Ok(const std::string& response) {
    ForwardReply reply;
    reply.kind = ForwardReply::Kind::kAnswered;
    reply.result.set_response(response);
    return reply;
  }
  // An answer from a business whose inbox keeps the outcome (`eonce-inbox: kept`).
  static ForwardReply Kept(const std::string& response) {
    ForwardReply reply = Ok(response);
    reply.inbox_kept = true;
    return reply;
  }
  static ForwardReply Rejected(int code, const std::string& message) {
    ForwardReply reply;
    reply.kind = ForwardReply::Kind::kAnswered;
    reply.result.set_code(code);
    reply.result.set_message(message);
    return reply;
  }
  static ForwardReply Of(ForwardReply::Kind kind) {
    ForwardReply reply;
    reply.kind = kind;
    reply.detail = "scripted";
    return reply;
  }

  void set_next_reply(ForwardReply reply) { absl::MutexLock l(&mu_); next_reply_ = reply; }
  // What Knows answers: kCannotTell (no catalog, the default), or from this set: served,
  // else not served (or, while `pending`, not known yet).
  void set_methods(std::optional<std::set<std::string>> methods, bool pending = false) {
    absl::MutexLock l(&mu_);
    methods_ = std::move(methods);
    pending_ = pending;
  }
  MethodKnown Knows(const std::string& method) override {
    absl::MutexLock l(&mu_);
    if (!methods_.has_value()) return MethodKnown::kCannotTell;
    if (methods_->count(method) > 0) return MethodKnown::kServed;
    return pending_ ? MethodKnown::kNotYetKnown : MethodKnown::kNotServed;
  }
  void set_hold(bool hold) { absl::MutexLock l(&mu_); hold_ = hold; }
  void set_reachable(bool r) { absl::MutexLock l(&mu_); reachable_ = r; }
  void set_outcome(absl::StatusOr<v1::QueryOutcomeResponse> o) {
    absl::MutexLock l(&mu_);
    outcome_ = std::move(o);
  }
  size_t forwards() { absl::MutexLock l(&mu_); return calls_.size(); }
  ForwardCall call(size_t i) { absl::MutexLock l(&mu_); return calls_.at(i); }
  size_t queries() { absl::MutexLock l(&mu_); return queried_.size(); }
  size_t held() { absl::MutexLock l(&mu_); return held_.size(); }
  // Waits (at most `limit`) until `count` forwards are held; returns how many are.
  size_t WaitUntilHeld(size_t count, absl::Duration limit) {
    absl::MutexLock l(&mu_);
    auto enough = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return held_.size() >= count; };
    mu_.AwaitWithTimeout(absl::Condition(&enough), limit);
    return held_.size();
  }

 private:
  std::function<void(ForwardReply)> TakeHeld(bool newest) {
    absl::MutexLock lock(&mu_);
    std::function<void(ForwardReply)> done;
    if (newest) {
      done = std::move(held_.back());
      held_.pop_back();
    } else {
      done = std::move(held_.front());
      held_.pop_front();
    }
    return done;
  }

  absl::Mutex mu_;
  std::vector<ForwardCall> calls_ ABSL_GUARDED_BY(mu_);
  std::optional<std::set<std::string>> methods_ ABSL_GUARDED_BY(mu_);
  bool pending_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::string> queried_ ABSL_GUARDED_BY(mu_);
  std::deque<std::function<void(ForwardReply)>> held_ ABSL_GUARDED_BY(mu_);
  ForwardReply next_reply_ ABSL_GUARDED_BY(mu_) = Ok("ok");
  bool hold_ ABSL_GUARDED_BY(mu_) = false;
  bool reachable_ ABSL_GUARDED_BY(mu_) = true;
  absl::StatusOr<v1::QueryOutcomeResponse> outcome_ ABSL_GUARDED_BY(mu_) =
      absl::UnimplementedError("no outcome service");
};

}  // namespace eonce

#endif  // EONCE_DEDUPE_SIDECAR_UPSTREAM_FAKE_UPSTREAM_H_
