#include "tests/fuzz/fuzz_targets.h"

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "common/command/command.h"
#include "common/rpc/identity_uri.h"
#include "common/coord/slots.h"
#include "common/store/ttl.h"
#include "dedupe_sidecar/authz/policy.h"
#include "dedupe_sidecar/store/record_store.h"
#include "dedupe_sidecar/doors/transparent_call.h"

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

int FuzzSlotMap(const uint8_t* data, size_t size) {
  absl::StatusOr<SlotMap> map =
      SlotMap::FromJson(absl::string_view(reinterpret_cast<const char*>(data), size));
  if (!map.ok()) {
    Require(map.status().code() == absl::StatusCode::kInvalidArgument);
    return 0;
  }
  // A valid map gives every slot one owner that it names with an address, and survives a
  // round trip through its own JSON.
  uint32_t writable = 0;
  for (const v1::ShardInfo& shard : map->proto().shards()) {
    writable += map->WritableSlotsOf(shard.id());
  }
  Require(writable <= kSlotCount);
  for (uint32_t slot = 0; slot < kSlotCount; ++slot) {
    Require(!map->AddressOf(map->OwnerOf(slot)).empty());
    Require(!map->Migrating(slot) || map->HasShard(map->MovingTo(slot)));
  }
  absl::StatusOr<SlotMap> again = SlotMap::FromJson(map->ToJson());
  Require(again.ok() &&
          again->proto().SerializeAsString() == map->proto().SerializeAsString());
  // A move step either refuses or moves exactly one epoch on.
  absl::StatusOr<SlotMap> moved = BeginMove(*map, 0, 0, "fuzz-shard", "fuzz:1");
  Require(moved.ok() ? moved->epoch() == map->epoch() + 1 && moved->Migrating(0)
                     : moved.status().code() == absl::StatusCode::kInvalidArgument);
  return 0;
}

int FuzzPassThrough(const uint8_t* data, size_t size) {
  // Fields, one a line: certificate URI, stated workload, stated actor, method,
  // idempotency key, command id, body (the rest).
  std::vector<std::string> fields =
      absl::StrSplit(std::string(reinterpret_cast<const char*>(data), size),
                     absl::MaxSplits('\n', 6));
  fields.resize(7);
  const std::string& uri = fields[0];
  const std::string& method = fields[3];
  const std::string& key = fields[4];
  const std::string& command_id = fields[5];

  // Identities from a certificate: a name never holds a '/', an id names a workload or
  // an operator, never both, and neither without a tenant.
  std::string tenant = TenantFromSpiffeId(uri);
  std::string workload = WorkloadFromSpiffeId(uri);
  std::string operator_name = OperatorFromSpiffeId(uri);
  for (const std::string* name : {&tenant, &workload, &operator_name}) {
    Require(name->find('/') == std::string::npos);
  }
  Require(workload.empty() || operator_name.empty());
  Require(tenant.empty() ? workload.empty() && operator_name.empty() : true);
  if (auto epoch = EpochFromUri(uri)) Require(*epoch > 0);

  // The actor: stated, else the workload; a workload may state another only by an act
  // rule, and a revocation of the workload holds whoever it states.
  if (workload.empty()) workload = fields[1];
  const std::string& actor = EffectiveActor(workload, fields[2]);
  Require(actor == (fields[2].empty() ? workload : fields[2]));
  static const Policy* policy = new Policy(
      *Policy::Parse("act acme relay *\nallow acme * *\nrevoke acme mallory\n"));
  PolicyDecision decision = policy->Check("acme", workload, actor, method, 1);
  const bool revoked = actor == "mallory" || workload == "mallory";
  Require(decision.allowed == (!revoked && (actor == workload || workload == "relay")));
  Require(policy->Check("globex", workload, actor, method, 1).allowed == false);

  // A keyed call is one command, whatever the metadata holds; validation decides.
  if (!key.empty()) {
    v1::Command command = TransparentCommand(method, key, command_id, fields[6]);
    Require(command.idempotency_key() == key);
    Require(command.command_id() == (command_id.empty() ? CommandIdOfKey(key) : command_id));
    Require(PayloadHashMatches(command));
    Require(TransparentCommand(method, key, command_id, fields[6]).SerializeAsString() ==
            command.SerializeAsString());
    absl::Status valid = ValidateCommand(command, CommandLimits());
    Require(valid.ok() || valid.code() == absl::StatusCode::kInvalidArgument);
    if (valid.ok()) Require(key.size() <= CommandLimits().max_key_bytes);
  }
  return 0;
}

}  // namespace eonce::fuzz
