// Rules for the command envelope shared by the agent and the sidecar: limits, validation,
// key derivation and the payload hash. Every violation is INVALID_ARGUMENT naming the
// field, reason INVALID_FIELD, and is found before anything is written.
#ifndef EONCE_COMMON_COMMAND_COMMAND_H_
#define EONCE_COMMON_COMMAND_COMMAND_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "eonce/v1/command.pb.h"

namespace eonce {

// Request metadata the sidecar sends to business services and reads from callers.
inline constexpr char kCommandIdHeader[] = "eonce-command-id";
inline constexpr char kIdempotencyKeyHeader[] = "eonce-idempotency-key";
inline constexpr char kTransparentKeyHeader[] = "idempotency-key";
inline constexpr char kTenantHeader[] = "eonce-tenant";
// The eonce component a plaintext caller of a business port says it is ("sidecar",
// "relay", "checker"); with mutual TLS the component comes from the certificate
// (spiffe://<trust domain>/eonce/<component>) and this header is ignored. A business port
// admits components and operators only (services/inbox/caller_gate.h).
inline constexpr char kComponentHeader[] = "eonce-component";
// The components eonce's own clients of a business port state.
inline constexpr char kSidecarComponent[] = "sidecar";
inline constexpr char kRelayComponent[] = "relay";
inline constexpr char kActorHeader[] = "eonce-actor";
// The workload a plaintext (development) caller claims to be; with mutual TLS the
// workload comes from the certificate and this header is ignored.
inline constexpr char kWorkloadHeader[] = "eonce-workload";
// The operator a plaintext (development) caller claims to be; with mutual TLS the
// operator comes from the certificate and this header is ignored.
inline constexpr char kOperatorHeader[] = "eonce-operator";
inline constexpr char kFencingTokenHeader[] = "eonce-fencing-token";
// The command's entity, "<type>/<id>": a business that keeps an inbox files the call's
// entry under the entity's slot, so that the entry moves with the slot.
inline constexpr char kEntityHeader[] = "eonce-entity";
// From a sharded sidecar: the command's slot and the epoch of the slot map it was admitted
// by, in decimal. A business built on services/inbox refuses the write when the slot's
// fence is above the epoch (FAILED_PRECONDITION SLOT_FENCED: the slot has moved on, and
// nothing was applied). An unsharded sidecar sends neither.
inline constexpr char kSlotHeader[] = "eonce-slot";
inline constexpr char kSlotEpochHeader[] = "eonce-slot-epoch";
// A business's refusal of a write whose slot epoch is below the slot's fence; proves
// that nothing was applied.
inline constexpr char kSlotFencedReason[] = "SLOT_FENCED";
inline constexpr char kCredentialEpochHeader[] = "eonce-credential-epoch";
// The command's payload hash (SHA-256 of method and request), in hex: a business that
// keeps an inbox compares it when a key comes back.
inline constexpr char kPayloadHashHeader[] = "eonce-payload-sha256";
inline constexpr char kNotAppliedTrailer[] = "eonce-not-applied";
inline constexpr char kEntityRevisionTrailer[] = "eonce-entity-revision";
// Sent by a business that keeps the call's outcome in an inbox (services/inbox):
// kInboxKept on an answer that the inbox holds durably (the sidecar then need not sync
// its own records before forwarding or answering), kInboxConflict on a refusal because
// the key belongs to another command or payload (nothing was applied).
inline constexpr char kInboxTrailer[] = "eonce-inbox";
inline constexpr char kInboxKept[] = "kept";
inline constexpr char kInboxConflict[] = "conflict";

// The most commands one SubmitBatch or EnqueueBatch call may carry.
inline constexpr int kMaxBatchCommands = 64;
// What refuses a whole batch call of `commands` commands before any is looked at:
// INVALID_ARGUMENT for none (INVALID_FIELD) or more than kMaxBatchCommands
// (BATCH_TOO_LARGE); OK otherwise.
absl::Status BatchSizeRefusal(int commands);

struct CommandLimits {
  size_t max_command_id_bytes = 128;
  size_t max_key_bytes = 256;
  size_t max_tenant_bytes = 64;
  size_t max_actor_bytes = 128;
  size_t max_method_bytes = 256;
  size_t max_entity_bytes = 128;
  size_t max_request_bytes = 1 << 20;
};

// Checks every field of a complete command (as the sidecar receives it).
absl::Status ValidateCommand(const v1::Command& command, const CommandLimits& limits);

// Checks the fields a producer must give (the agent fills in the rest).
absl::Status ValidateProducerCommand(const v1::Command& command, const CommandLimits& limits);

// Tenant and actor names: [A-Za-z0-9._@-]{1,max}.
absl::Status ValidateName(const std::string& value, size_t max_bytes, const char* field);

// "<operation>:<entity type>/<entity id>:<command id>", operation = the method's last part.
std::string DeriveIdempotencyKey(const v1::Command& command);

// The command id of a transparent-mode call that names only its idempotency key: the
// same for every retry of the key, and valid whatever characters the key holds
// ("key-" and 32 hex digits of its SHA-256).
std::string CommandIdOfKey(const std::string& idempotency_key);

// Sets payload_hash to version 1 of the hash of the command's method and request.
void FillPayloadHash(v1::Command* command);

// True when the command's payload_hash is version 1 and matches its bytes.
bool PayloadHashMatches(const v1::Command& command);

}  // namespace eonce

#endif  // EONCE_COMMON_COMMAND_COMMAND_H_
