// Replayer: the agent's at-least-once replay engine (the article's OutboxReplayEngine).
//
// Pump() picks due records (only lane heads are due, so commands of one entity go out in
// enqueue order and a failing entity blocks only itself), claims each under a lease with
// a fresh fencing token, and starts its attempt; at most `max_in_flight` attempts run at
// once and at most one per entity, so the rounds of several Pumps are in flight together
// while no entity has two attempts out. An attempt whose last outcome is unknown
// reconciles with the sidecar before it sends anything; any other is claimed and marked
// SENDING in one write. The sends a Pump starts (at most `max_round`) go to the client
// together (SidecarClient::SubmitMany), so a batching client sends a round as SubmitBatch
// calls, not its first command alone. Each answer is classified (retry_policy.h)
// and moves the record in one atomic write, guarded by the claim token: the late answer
// of a worker whose claim was taken over is refused. An answer is applied only if its
// fence still fits the current credential. Moves are written unsynced (a lost one leaves
// the record SENDING, which a restart reconciles), except what the world outside acts on:
// a final state other than ACKED is durable before anyone is told of it, and the claim
// that first marks a record ever_sent before its command leaves the process (the claims
// of one Pump share one sync; a batch of answers, one more). As a SendOutlook it tells the
// Outbox which new lane heads it would send at once, so that they are marked with their
// Enqueue's sync and their first claim needs none.
//
// Pump is called by one thread (the agent's loop, or the simulation); answers arrive on
// the SidecarClient's threads. `wake`, if given, is called whenever an attempt ends, since
// its slot, and maybe the next command of its entity, are then free for the next Pump: a
// backlog drains at the pace of the answers, not of the caller's idle timer. It runs
// after the slot is freed and the Replayer's lock released (so it may ask CanStart, and
// in_flight() can read 0 while it still runs: what it calls must outlive the Replayer's
// last attempt); it must not Pump on the answering thread. The answers of one batch (a CallbackBatch) wake it once, after the
// last of them, so the next Pump takes every slot they freed as one round. Thread-safe.
// Collaborators must outlive the Replayer, and every attempt must have finished
// (in_flight() == 0) before it is destroyed.
#ifndef EONCE_OUTBOX_AGENT_CORE_REPLAYER_H_
#define EONCE_OUTBOX_AGENT_CORE_REPLAYER_H_

#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "common/base/clock.h"
#include "common/base/fault.h"
#include "common/base/random.h"
#include "outbox_agent/core/credential.h"
#include "outbox_agent/store/outbox_store.h"
#include "outbox_agent/core/retry_policy.h"
#include "outbox_agent/core/send_outlook.h"
#include "outbox_agent/core/sidecar_client.h"
#include "outbox_agent/core/state_feed.h"

namespace eonce {

struct ReplayerOptions {
  // Time a claim keeps beyond the calls it covers: queueing and the outbox writes.
  static constexpr int64_t kClaimSlackMs = 500;
  // Two full rounds of max_round, one for each SubmitBatch call the real client keeps in
  // flight to a sidecar (docs/performance.md, "The drain"). Three rounds drained a little
  // faster, but under an open loop at half the drain's rate a command's ACKED p99 grew
  // to seconds (2.3 s to 8.5 s, against 53 ms with two), so two it is.
  int max_in_flight = 128;
  // Attempts one Pump claims (one synced write) and hands to the client together (one
  // SubmitBatch per sidecar); 1 to max_in_flight (ValidateReplayerOptions, --max_round).
  // Below max_in_flight, so that one round's claim is written while the round before is
  // at the sidecar, rather than every attempt waiting in step. 64 fills one SubmitBatch
  // (kMaxBatchCommands): smaller rounds cost a synced claim and a call for fewer commands.
  int max_round = 64;
  // Covers the longest work under one claim, a Reconcile then a Submit, plus
  // kClaimSlackMs (ValidateReplayerOptions); every call is also cut off before its claim
  // ends, so a live worker's claim never runs out under it.
  int64_t claim_ttl_ms = 30'000;
  int64_t submit_timeout_ms = 10'000;
  std::string owner = "agent";
  RetryOptions retry;
};

// INVALID_ARGUMENT naming the flag to change when a claim does not cover its work.
absl::Status ValidateReplayerOptions(const ReplayerOptions& options);

struct ReplayStats {
  std::atomic<int64_t> attempts{0};
  std::atomic<int64_t> reconciles{0};
  std::atomic<int64_t> acked{0};
  std::atomic<int64_t> retries_retryable{0};
  std::atomic<int64_t> retries_unknown{0};
  std::atomic<int64_t> retries_unclassified{0};
  std::atomic<int64_t> parked{0};
  std::atomic<int64_t> dead_lettered{0};
  std::atomic<int64_t> expired{0};
  std::atomic<int64_t> conflicts{0};
  std::atomic<int64_t> rejected{0};
  std::atomic<int64_t> stale_claims_refused{0};
  std::atomic<int64_t> stale_responses_refused{0};
};

class Replayer : public SendOutlook {
 public:
  Replayer(OutboxStore& store, SidecarClient& client, CredentialState& credential, Clock& clock,
           Random& random, ReplayerOptions options, StateFeed* feed = nullptr,
           FaultInjector* faults = nullptr, std::function<void()> wake = nullptr);

  // Starts attempts for due records; returns how many it started.
  int Pump();
  // Whether Pump could start an attempt now: the credential is active and an attempt slot
  // is free. (Each attempt's end calls `wake`, outside the replayer's lock, once its slot
  // is free.)
  bool CanStart() const;
  // SendOutlook: the credential is active, an attempt slot is free and the command's route
  // has told its retention (Pump sends nothing before it knows it).
  bool SendsAtOnce(const v1::Command& command) const override;
  int in_flight() const;
  const ReplayStats& stats() const { return stats_; }
  const ReplayerOptions& options() const { return options_; }

 private:
  struct Attempt;

  // Moves a record that may not be sent to its final state; false if it may be sent.
  bool RetireIfTooOld(const OutboxRecord& record);
  // Marks the record SENDING, then dispatches it.
  void Send(std::shared_ptr<Attempt> attempt);
  // Whether the attempt may go on to be sent (a fault point); ends it if not.
  bool ReadyToSend(const std::shared_ptr<Attempt>& attempt);
  // Sends the attempts of records already marked SENDING, handed to the client together
  // (SidecarClient::SubmitMany), so a round's attempts leave as batches.
  void Dispatch(std::vector<std::shared_ptr<Attempt>> attempts);
  // submit_timeout_ms from now, but kClaimSlackMs before the attempt's claim ends.
  int64_t CallDeadline(const Attempt& attempt) const;
  void Reconcile(std::shared_ptr<Attempt> attempt);
  void OnAnswer(std::shared_ptr<Attempt> attempt, absl::StatusOr<v1::SubmitResponse> answer);
  // Applies a classified failure to the record.
  void OnFailure(const std::shared_ptr<Attempt>& attempt, const absl::Status& status);
  // Moves the record of the attempt by `change`, unless its claim was taken over, and
  // ends the attempt. Within a CallbackBatch the write waits for the batch's end and
  // goes with the other moves made meanwhile.
  void Transition(const std::shared_ptr<Attempt>& attempt, std::string why,
                  std::function<void(OutboxRecord*)> change);
  // Writes every move queued by Transition (OutboxStore::MutateMany) and ends their
  // attempts.
  void WriteTransitions();
  // Ends the attempt; `wake` unless more ends follow at once (a batch of answers wakes
  // the loop once, so its next Pump sees every slot the batch freed).
  void Done(const std::shared_ptr<Attempt>& attempt, bool wake = true);
  void Publish(const OutboxRecord& record);

  OutboxStore& store_;
  SidecarClient& client_;
  CredentialState& credential_;
  Clock& clock_;
  Random& random_;
  const ReplayerOptions options_;
  StateFeed* const feed_;
  FaultInjector* const faults_;
  const std::function<void()> wake_;
  Backoff backoff_;
  ReplayStats stats_;

  struct Pending {
    std::shared_ptr<Attempt> attempt;
    std::string why;
    std::function<void(OutboxRecord*)> change;
  };
  absl::Mutex transitions_mu_;
  // Bounded by the attempts in flight: each has at most one move queued.
  std::vector<Pending> transitions_ ABSL_GUARDED_BY(transitions_mu_);

  mutable absl::Mutex mu_;
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_set<std::string> busy_entities_ ABSL_GUARDED_BY(mu_);
};

}  // namespace eonce

#endif  // EONCE_OUTBOX_AGENT_CORE_REPLAYER_H_
