#include "tests/fuzz/fuzz_targets.h"

#include <cstdlib>
#include <string>

#include "common/command.h"
#include "common/ttl.h"
#include "dedupe_sidecar/policy.h"
#include "dedupe_sidecar/record_store.h"

namespace eonce::fuzz {
namespace {

void Require(bool condition) {
  if (!condition) std::abort();
}

}  // namespace

int FuzzCommand(const uint8_t* data, size_t size) {
  v1::Command command;
  if (!command.ParseFromArray(data, static_cast<int>(size))) return 0;
  CommandLimits limits;
  absl::Status valid = ValidateCommand(command, limits);
  if (valid.ok()) {
    // What passes validation keeps every limit.
    Require(!command.command_id().empty() && command.command_id().size() <= limits.max_command_id_bytes);
    Require(command.idempotency_key().size() <= limits.max_key_bytes);
    Require(command.request().size() <= limits.max_request_bytes);
    Require(PayloadHashMatches(command));
  } else {
    Require(valid.code() == absl::StatusCode::kInvalidArgument);
  }
  // Deriving a key never fails, whatever the fields hold.
  (void)DeriveIdempotencyKey(command);
  return 0;
}

int FuzzRecord(const uint8_t* data, size_t size) {
  absl::string_view value(reinterpret_cast<const char*>(data), size);
  Framed framed;
  if (!DecodeFramed(value, &framed)) {
    Require(size < kFrameHeaderBytes);
    return 0;
  }
  Require(EncodeFramed(framed.drop_at_ms, framed.trim_at_ms, framed.payload) == value);
  RecordTrimmer trimmer;
  std::string trimmed;
  if (trimmer.Trim(framed.payload, &trimmed)) {
    Record tombstone;
    Require(tombstone.ParseFromString(trimmed));
    Require(tombstone.tombstone());
    Require(tombstone.result().response().empty());
    // Trimming is done once.
    std::string again;
    Require(!trimmer.Trim(trimmed, &again));
  }
  return 0;
}

int FuzzPolicy(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  auto policy = Policy::Parse(text);
  if (!policy.ok()) {
    Require(policy.status().code() == absl::StatusCode::kInvalidArgument);
    return 0;
  }
  PolicyDecision decision = policy->Check("acme", "agent", "alice", "/a.B/C", 3);
  Require(decision.allowed || decision.reason == "POLICY_DENIED" ||
          decision.reason == "CREDENTIAL_REVOKED" || decision.reason == "ACTOR_NOT_PERMITTED");
  (void)policy->IsReadOnly("/a.B/C");
  return 0;
}

}  // namespace eonce::fuzz
