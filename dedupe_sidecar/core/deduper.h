// Deduper: the sidecar's receiver contract, independent of gRPC.
//
// For each Submit it decides, under a per-key lock (striped; different keys never wait on
// each other), what the command gets:
//   - first seen: a `started` record with a fencing token and a lease is written, then
//     the request is forwarded upstream, then the outcome (`committed` or `failed`) is
//     written and returned. Where the truth is: for a method whose business keeps an
//     inbox (InboxMethods), the business's own durable write is the commit point: the
//     started record is only claimed in memory (InFlightClaims) and the outcome is
//     written without waiting for an fsync; for any other, each is synced before the
//     step that follows it (docs/design.md);
//   - a duplicate of a finished command: the stored answer, marked as a replay;
//   - the same key with another payload: a terminal conflict;
//   - a duplicate while the original is in flight (live lease): IN_PROGRESS with a delay;
//   - a `started` record whose lease ran out (a crash, or an unknown outcome): recovery.
//     The business is asked QueryOutcome: applied -> store that result; not applied ->
//     forward again under a new token; cannot tell (legacy) -> park for an operator.
// A forward's late answer is applied only if the record still carries its token.
// Authorization runs on every Submit, duplicates included.
//
// Thread-safe. Callbacks run on the caller's thread or the Upstream's. Collaborators
// must outlive the Deduper.
#ifndef EONCE_DEDUPE_SIDECAR_CORE_DEDUPER_H_
#define EONCE_DEDUPE_SIDECAR_CORE_DEDUPER_H_

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/base/clock.h"
#include "common/command/command.h"
#include "common/base/fault.h"
#include "common/base/striped_lock.h"
#include "common/command/trace_context.h"
#include "dedupe_sidecar/authz/audit_log.h"
#include "dedupe_sidecar/core/deduper_options.h"
#include "dedupe_sidecar/core/deduper_stats.h"
#include "dedupe_sidecar/core/in_flight_claims.h"
#include "dedupe_sidecar/core/inbox_methods.h"
#include "dedupe_sidecar/core/pending_durability.h"
#include "dedupe_sidecar/authz/policy.h"
#include "dedupe_sidecar/store/record_store.h"
#include "dedupe_sidecar/sharding/shard_gate.h"
#include "dedupe_sidecar/upstream/upstream.h"
#include "eonce/v1/sidecar.pb.h"

namespace eonce {

// Who is calling, from the authenticated connection.
struct Caller {
  std::string tenant;
  // The workload its credential proves (a header in development mode); may be empty.
  std::string workload;
  // The actor it states (the eonce-actor header); a command's own actor comes first. The
  // policy decides whether the workload may act for it.
  std::string actor;
  // The operator the caller proved it is (client certificate; a header in development
  // mode); empty for everyone else.
  std::string operator_name;
  int64_t credential_epoch = 0;  // the caller's current epoch, echoed in the fence
  // The epoch its client certificate carries (mutual TLS): what revocations compare,
  // whatever the command or a header says. Unset without a certificate (development),
  // where the command's own epoch is compared.
  std::optional<int64_t> certificate_epoch;
  int64_t deadline_ms = 0;       // absolute; 0 = none
  grpc::CallbackServerContext* context = nullptr;
  // The call carries one command (Submit, not an item of SubmitBatch).
  bool one_command = false;
  // The call's traceparent/tracestate metadata, checked (Deduper::KeepTrace); a command's
  // own trace field comes first.
  v1::TraceContext trace;
};

// The longest note an operator may leave on a resolution (it is audited).
inline constexpr size_t kMaxOperatorNoteBytes = 4096;

class Deduper {
 public:
  using SubmitDone = std::function<void(absl::StatusOr<v1::SubmitResponse>)>;

  // Nothing in a Submit waits for a disk: reads and unsynced writes run on the calling
  // thread (or the one delivering the business's answer), and what follows a write runs
  // once the store calls back that it is durable. `claims`: where in-flight commands of
  // inbox-keeping businesses are claimed (null: a table of the Deduper's own).
  Deduper(RecordStore& store, AuditLog& audit, Upstream& upstream, PolicyStore& policy,
          Clock& clock, DeduperOptions options, FaultInjector* faults = nullptr,
          ShardGate* shards = nullptr, InFlightClaims* claims = nullptr);

  // `done` runs exactly once. The caller and the command are kept for the call's life: a
  // caller that owns them moves them in (the gRPC handlers do) rather than have them
  // copied.
  void Submit(Caller caller, v1::Command command, SubmitDone done);

  // What the sidecar holds for a key or command id of the caller's tenant. Checked as a
  // duplicate Submit of that command would be (the policy as it stands now, for the
  // record's actor and method; an operator the policy names may look up any key), and
  // answered only from what a crash cannot take back: an outcome whose fsync is still to
  // come is PROCESSING. Each answer and refusal is audited ("reconciled", "unauthorized",
  // "conflict"). Never waits: it reads, and answers at once.
  absl::StatusOr<v1::ReconcileResponse> Reconcile(const Caller& caller,
                                                  const v1::ReconcileRequest& request);
  absl::StatusOr<v1::ResolveParkedResponse> ResolveParked(
      const Caller& caller, const v1::ResolveParkedRequest& request);
  absl::StatusOr<v1::ListParkedResponse> ListParked(const Caller& caller, int limit);

  v1::GetInfoResponse Info() const;
  const DeduperStats& stats() const { return stats_; }
  // Sharded: the slot gate (null when this sidecar takes every command).
  ShardGate* shards() const { return shards_; }
  // Counts a caller refused at the transport boundary (identity, not policy).
  void CountDenied() { stats_.denied++; }
  // Keeps what is valid of a caller's or a command's trace context, counting what it
  // drops: tracing never turns a call away (common/command/trace_context.h).
  void KeepTrace(v1::TraceContext* trace);
  // PERMISSION_DENIED (CREDENTIAL_REVOKED) for a named operator whose credential a
  // `revoke` rule names (every epoch, or those below the rule's), as for a workload;
  // checked for every call where its caller is settled (CallerOf), whatever it asks.
  absl::Status RefuseRevokedOperator(const Caller& caller);
  // PERMISSION_DENIED (OPERATOR_REQUIRED) unless the caller is an operator the policy
  // names for its tenant, and (CREDENTIAL_REVOKED) unless its credential stands;
  // UNAUTHENTICATED without a tenant.
  absl::Status RequireOperator(const Caller& caller);
  // PERMISSION_DENIED (PLATFORM_OPERATOR_REQUIRED) unless the policy lets the caller, a
  // proven operator whose credential stands, make calls that reach every tenant (a
  // `platform` rule): the slot map, the whole audit chain.
  absl::Status RequirePlatformOperator(const Caller& caller);
  const DeduperOptions& options() const { return options_; }
  // Commands in flight whose started record is only claimed in memory.
  size_t claims() const { return claims_.size(); }

 private:
  struct Context;
  struct Begun;

  Begun Begin(const std::shared_ptr<Context>& ctx);
  // What Begin decided, once what it wrote or read is durable: answer, forward or recover.
  // `alone`: on the thread of a call that carries this one command (ForwardCall::alone).
  void Proceed(const std::shared_ptr<Context>& ctx, Begun begun, bool alone = false);
  // Runs `then` once what an answer rests on is durable: a record this call wrote
  // (`wrote`), or an outcome it read whose own write still waits for its fsync
  // (not_durable_); at once for an outcome already on disk.
  void AfterDurable(const std::string& scoped_key, Record::State state, bool wrote,
                    RocksStore::DurableFn then);
  void Forward(const std::shared_ptr<Context>& ctx, uint64_t token, bool alone = false);
  void OnForwardReply(const std::shared_ptr<Context>& ctx, uint64_t token, ForwardReply reply);
  void Recover(const std::shared_ptr<Context>& ctx, uint64_t token);
  // The deadline of a call made under the lease: `timeout_ms` from now, the caller's
  // deadline, and kLeaseSlackMs before the lease ends, whichever comes first.
  int64_t CallDeadline(const Context& ctx, int64_t timeout_ms);
  void OnOutcome(const std::shared_ptr<Context>& ctx, uint64_t token,
                 absl::StatusOr<v1::QueryOutcomeResponse> outcome);
  // Stores an outcome if `token` still holds the record; answers the caller either way.
  // `kept`: the business holds the outcome durably in its inbox, so the answer need not
  // wait for the sidecar's fsync. Inside a CallbackBatch (the answers of one batched
  // business call, delivered back to back) the outcomes wait for the batch to close and
  // are written together: one RocksDB write for all of them (deduper_finish.cc).
  void Finish(const std::shared_ptr<Context>& ctx, uint64_t token, v1::CallResult result,
              int64_t entity_revision, const char* decision, bool kept);
  struct Finishing {
    std::shared_ptr<Context> ctx;
    uint64_t token;
    v1::CallResult result;
    int64_t entity_revision;
    const char* decision;
    bool kept;
  };
  // Finishes what the closing batch queued (those another thread's batch took are done).
  void FinishQueued();
  // Finishes each, in rounds of distinct keys: per round, one write under every key's
  // lock, then the answers.
  void FinishAll(std::vector<Finishing> finishing);
  void FinishRound(std::vector<Finishing>& finishing, const std::vector<absl::string_view>& keys);
  // Answers with a stored outcome once what it rests on is durable (AfterDurable).
  void AnswerStored(const std::shared_ptr<Context>& ctx, absl::StatusOr<v1::SubmitResponse> answer,
                    std::optional<Record::State> await, bool wrote);
  // Under the key's lock, for an attempt that holds `token`. FreeAttempt: nothing was
  // applied, so its claim or record goes and the key is free; true when it deleted a
  // stored record, whose delete the answer must wait for (AnswerOnceFreed). EndLease: the
  // forward is over with its outcome unknown, so its record (a claim becomes one) gets a
  // lease that has ended, and the next attempt recovers it.
  bool FreeAttempt(const Context& ctx, uint64_t token);
  void EndLease(const Context& ctx, uint64_t token);
  // Answers once the delete of a freed record (`freed`) is durable; at once otherwise.
  void AnswerOnceFreed(const std::shared_ptr<Context>& ctx, bool freed, absl::Status answer);
  // The business's inbox refused the key (it belongs to another command or payload):
  // frees this attempt's record and answers the conflict.
  void OnKeyConflict(const std::shared_ptr<Context>& ctx, uint64_t token,
                     const ForwardReply& reply);
  // The stored answer for a duplicate; `revoked`: the caller's credential is revoked.
  absl::StatusOr<v1::SubmitResponse> Replay(const Context& ctx, const Record& record,
                                            bool revoked = false);
  // The answer to a call the business turned away (upstream.h): INVALID_ARGUMENT
  // UPSTREAM_UNIMPLEMENTED, or FAILED_PRECONDITION UPSTREAM_REFUSED.
  absl::Status Refused(const Context& ctx, const v1::CallResult& result);
  v1::SubmitResponse Response(const Context& ctx, const Record& record,
                              v1::Disposition disposition) const;
  void Audit(const Context& ctx, const char* decision, const std::string& result,
             uint64_t token = 0);
  // Counts and audits a command refused as malformed (decision "invalid"), with its
  // fields cut to their limits, then answers `why`.
  void RefuseInvalid(Context& ctx, absl::Status why);
  // UNAUTHENTICATED for a caller without a tenant.
  static absl::Status RequireTenant(const Caller& caller);
  // A key belongs to the command that first used it, with that command's payload: a
  // terminal conflict (IDEMPOTENCY_CONFLICT, KEY_REUSED) otherwise. Empty arguments are
  // not compared.
  static absl::Status CheckOwner(const Record& record, const std::string& command_id,
                                 const std::string& payload_sha256);

  RecordStore& store_;
  AuditLog& audit_;
  Upstream& upstream_;
  PolicyStore& policy_;
  Clock& clock_;
  const DeduperOptions options_;
  FaultInjector* const faults_;
  // Sharded: the slots this sidecar may take (null: it takes every command).
  ShardGate* const shards_;
  std::unique_ptr<InFlightClaims> own_claims_;  // when none was given
  InFlightClaims& claims_;
  StripedLocks locks_;
  PendingDurability not_durable_;  // outcomes written, their fsync still to come
  absl::Mutex finishing_mu_;
  // Answers queued by Finish inside a CallbackBatch, until it closes.
  std::vector<Finishing> finishing_ ABSL_GUARDED_BY(finishing_mu_);
  InboxMethods inbox_methods_;     // methods whose business is the commit point
  DeduperStats stats_;
};

}  // namespace eonce

#endif  // EONCE_DEDUPE_SIDECAR_CORE_DEDUPER_H_
