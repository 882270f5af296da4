// The state one Submit carries through its steps (Deduper::Context) and what Begin decided
// (Deduper::Begun): private to the Deduper's own files.
#ifndef EONCE_DEDUPE_SIDECAR_CORE_DEDUPER_CONTEXT_H_
#define EONCE_DEDUPE_SIDECAR_CORE_DEDUPER_CONTEXT_H_

#include <cstdint>
#include <optional>
#include <string>

#include "dedupe_sidecar/core/deduper.h"

namespace eonce {

// The hint given with OUTCOME_PENDING: recovery may run at once, but a short pause lets
// a restarting business come back first.
inline constexpr int64_t kPendingRetryMs = 200;

struct Deduper::Context {
  Caller caller;
  v1::Command command;
  std::string actor;
  std::string scoped_key;
  int64_t lease_expires_ms = 0;  // of the lease this submit holds, once it holds one
  SubmitDone done;
  // Sharded: held for the command's slot while anything of its work may still run.
  ShardGate::Pass pass;
  // Room in the audit queue for the events this Submit appends (Deduper::Audit uses it;
  // mutable, as the audit is made from a const Context). Every event comes before the
  // answer, so the answer gives back what is left.
  mutable AuditLog::Reservation audit_room;

  void Answer(absl::StatusOr<v1::SubmitResponse> answer) {
    audit_room.Release();
    SubmitDone callback = std::move(done);
    done = nullptr;
    if (callback) callback(std::move(answer));
  }
};

struct Deduper::Begun {
  enum class Kind { kAnswer, kForward, kRecover };
  Kind kind = Kind::kAnswer;
  absl::StatusOr<v1::SubmitResponse> answer = absl::InternalError("unset");
  uint64_t token = 0;
  // The state of a record that Begin wrote, or read to answer from, and that must be
  // durable before the forward or the answer: awaited once the key's lock is released.
  std::optional<Record::State> await;
  bool wrote = false;  // Begin wrote it (a read outcome waits only while its write does)
};

}  // namespace eonce

#endif  // EONCE_DEDUPE_SIDECAR_CORE_DEDUPER_CONTEXT_H_
