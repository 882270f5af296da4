#include "common/command/command.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/hash.h"
#include "common/base/status.h"

namespace eonce {
namespace {

absl::Status Invalid(absl::string_view field, absl::string_view problem) {
  return Error(absl::StatusCode::kInvalidArgument, "INVALID_FIELD",
               absl::StrCat(field, ": ", problem));
}

bool AllOf(absl::string_view value, absl::string_view extra) {
  for (char c : value) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              extra.find(c) != absl::string_view::npos;
    if (!ok) return false;
  }
  return true;
}

bool Printable(absl::string_view value) {
  for (char c : value) {
    if (c < 0x21 || c > 0x7e) return false;
  }
  return true;
}

absl::Status CheckToken(absl::string_view value, size_t max, absl::string_view field,
                        absl::string_view extra) {
  if (value.empty()) return Invalid(field, "required");
  if (value.size() > max) return Invalid(field, absl::StrCat("longer than ", max, " bytes"));
  if (!AllOf(value, extra)) {
    return Invalid(field, absl::StrCat("only letters, digits and \"", extra, "\" allowed"));
  }
  return absl::OkStatus();
}

absl::Status CheckProducerFields(const v1::Command& c, const CommandLimits& limits) {
  const std::string& method = c.target_method();
  if (method.empty()) return Invalid("target_method", "required");
  if (method.size() > limits.max_method_bytes) {
    return Invalid("target_method", absl::StrCat("longer than ", limits.max_method_bytes));
  }
  // "/package.Service/Method"
  size_t last = method.rfind('/');
  if (method[0] != '/' || last == 0 || last + 1 >= method.size() || !Printable(method)) {
    return Invalid("target_method", "must look like /package.Service/Method");
  }
  // eonce's own calls to a business (its outbox, its data by slot, its outcomes and
  // effects) are never a command: a command to AckFollowUps would lose credits.
  if (method.rfind("/eonce.v1.", 0) == 0) {
    return Invalid("target_method", "the eonce.v1 services are eonce's own, not a command's target");
  }
  if (c.request().size() > limits.max_request_bytes) {
    return Invalid("request", absl::StrCat("larger than ", limits.max_request_bytes, " bytes"));
  }
  EONCE_RETURN_IF_ERROR(CheckToken(c.entity().type(), 64, "entity.type", "_.-"));
  if (c.entity().id().empty()) return Invalid("entity.id", "required");
  if (c.entity().id().size() > limits.max_entity_bytes || !Printable(c.entity().id())) {
    return Invalid("entity.id", "1..128 printable ASCII bytes");
  }
  if (!c.command_id().empty()) {
    EONCE_RETURN_IF_ERROR(
        CheckToken(c.command_id(), limits.max_command_id_bytes, "command_id", "._:-"));
  }
  if (!c.idempotency_key().empty() &&
      (c.idempotency_key().size() > limits.max_key_bytes || !Printable(c.idempotency_key()))) {
    return Invalid("idempotency_key",
                   absl::StrCat("1..", limits.max_key_bytes, " printable ASCII bytes"));
  }
  if (!c.actor().empty()) {
    EONCE_RETURN_IF_ERROR(ValidateName(c.actor(), limits.max_actor_bytes, "actor"));
  }
  if (!c.tenant().empty()) {
    EONCE_RETURN_IF_ERROR(ValidateName(c.tenant(), limits.max_tenant_bytes, "tenant"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status BatchSizeRefusal(int commands) {
  if (commands == 0) {
    return WithErrorMetadata(Error(absl::StatusCode::kInvalidArgument, "INVALID_FIELD",
                                   "commands: a batch needs at least one command"),
                             "field", "commands");
  }
  if (commands > kMaxBatchCommands) {
    return Error(absl::StatusCode::kInvalidArgument, "BATCH_TOO_LARGE",
                 absl::StrCat("commands: ", commands, " in one batch, at most ",
                              kMaxBatchCommands, "; nothing was written"));
  }
  return absl::OkStatus();
}

absl::Status ValidateName(const std::string& value, size_t max_bytes, const char* field) {
  return CheckToken(value, max_bytes, field, "._@-");
}

absl::Status ValidateProducerCommand(const v1::Command& command, const CommandLimits& limits) {
  return CheckProducerFields(command, limits);
}

absl::Status ValidateCommand(const v1::Command& command, const CommandLimits& limits) {
  EONCE_RETURN_IF_ERROR(CheckProducerFields(command, limits));
  if (command.command_id().empty()) return Invalid("command_id", "required");
  if (command.idempotency_key().empty()) return Invalid("idempotency_key", "required");
  if (command.payload_hash().version() != kPayloadHashVersion) {
    return Invalid("payload_hash.version", absl::StrCat("must be ", kPayloadHashVersion));
  }
  if (!PayloadHashMatches(command)) {
    return Invalid("payload_hash.sha256", "does not match target_method and request");
  }
  return absl::OkStatus();
}

std::string DeriveIdempotencyKey(const v1::Command& command) {
  const std::string& method = command.target_method();
  absl::string_view operation = method;
  size_t last = method.rfind('/');
  if (last != std::string::npos) operation = absl::string_view(method).substr(last + 1);
  return absl::StrCat(operation, ":", command.entity().type(), "/", command.entity().id(),
                      ":", command.command_id());
}

std::string CommandIdOfKey(const std::string& idempotency_key) {
  return absl::StrCat("key-", HexOf(Sha256(idempotency_key)).substr(0, 32));
}

void FillPayloadHash(v1::Command* command) {
  command->mutable_payload_hash()->set_version(kPayloadHashVersion);
  command->mutable_payload_hash()->set_sha256(
      PayloadHashV1(command->target_method(), command->request()));
}

bool PayloadHashMatches(const v1::Command& command) {
  return command.payload_hash().version() == kPayloadHashVersion &&
         command.payload_hash().sha256() ==
             PayloadHashV1(command.target_method(), command.request());
}

}  // namespace eonce
