#include "tests/security/authz_matrix_requests.h"

#include "absl/strings/str_cat.h"
#include "common/command/command.h"
#include "common/coord/slots.h"
#include "eonce/internal/reflection.pb.h"
#include "eonce/ledger/v1/ledger.pb.h"
#include "eonce/v1/agent.pb.h"
#include "eonce/v1/outcome.pb.h"
#include "eonce/v1/sidecar.pb.h"

namespace eonce::authz {

const std::set<std::string>& ReadOnly() {
  static const auto* methods = new std::set<std::string>{
      "/eonce.ledger.v1.Ledger/GetAccount", "/eonce.ledger.v1.Ledger/GetTotal",
      "/eonce.v1.Effects/ListEffects", "/eonce.v1.Outcome/QueryOutcome"};
  return *methods;
}

std::string PolicyText() {
  std::string text =
      "allow acme * *\n"
      "allow globex * *\n"
      "revoke acme mallory\n"
      "revoke acme laptop below_epoch=3\n"
      "operator acme oncall\n"
      "operator globex oncall\n"
      "platform acme sre\n";
  for (const std::string& method : ReadOnly()) absl::StrAppend(&text, "readonly ", method, "\n");
  return text;
}

std::string SpiffeId(const std::string& path) { return "spiffe://eonce.test/" + path; }

std::string WorkloadId(const std::string& tenant, const std::string& name) {
  return SpiffeId("tenant/" + tenant + "/workload/" + name);
}

std::string OperatorId(const std::string& tenant, const std::string& name) {
  return SpiffeId("tenant/" + tenant + "/operator/" + name);
}

namespace {

std::string OpenAccountRequest(const std::string& account, int64_t balance) {
  ledger::v1::OpenAccountRequest open;
  open.set_id(account);
  open.set_initial_balance(balance);
  return open.SerializeAsString();
}

}  // namespace

v1::Command ProducerCommand(const std::string& command_id, const std::string& account) {
  v1::Command c;
  c.set_command_id(command_id);
  c.set_target_method("/eonce.ledger.v1.Ledger/OpenAccount");
  c.set_request(OpenAccountRequest(account, 1'000));
  c.mutable_entity()->set_type("account");
  c.mutable_entity()->set_id(account);
  return c;
}

v1::Command SidecarCommand(const std::string& command_id, const std::string& account) {
  v1::Command c = ProducerCommand(command_id, account);
  c.set_idempotency_key(DeriveIdempotencyKey(c));
  FillPayloadHash(&c);
  return c;
}

std::string AttackKey(const std::string& method) { return "matrix:" + method; }

// The request each method gets: aimed at the victim's resources where the method names
// any. A method with no entry gets the empty message (as a new method would).
std::string RequestFor(const std::string& method, int call) {
  const uint32_t slot = SlotOf(kVictim, "account", kAccount);
  if (method == "/eonce.v1.Agent/Enqueue") {
    v1::EnqueueRequest r;
    *r.mutable_command() = ProducerCommand(kOutboxQueued, "dave");
    return r.SerializeAsString();
  }
  if (method == "/eonce.v1.Agent/EnqueueBatch") {
    v1::EnqueueBatchRequest r;
    *r.add_commands() = ProducerCommand(kOutboxQueued, "dave");
    return r.SerializeAsString();
  }
  if (method == "/eonce.v1.Agent/Get") {
    v1::GetRequest r;
    r.set_command_id(kOutboxAcked);
    return r.SerializeAsString();
  }
  if (method == "/eonce.v1.Agent/List") {
    v1::ListRequest r;
    r.set_limit(100);
    return r.SerializeAsString();
  }
  if (method == "/eonce.v1.Agent/Requeue") {
    v1::RequeueRequest r;
    r.set_command_id(kOutboxQueued);
    return r.SerializeAsString();
  }
  if (method == "/eonce.v1.Agent/Drop") {
    v1::DropRequest r;
    r.set_command_id(kOutboxQueued);
    r.set_why("matrix");
    return r.SerializeAsString();
  }
  if (method == "/eonce.v1.Agent/SetCredential") {
    v1::SetCredentialRequest r;  // still revoked, so nothing starts to replay
    r.set_epoch(3);
    r.set_revoked(true);
    return r.SerializeAsString();
  }
  if (method == "/eonce.v1.Sidecar/Submit") {
    v1::SubmitRequest r;
    *r.mutable_command() = SidecarCommand(kSubmitted, kAccount);
    return r.SerializeAsString();
  }
  if (method == "/eonce.v1.Sidecar/SubmitBatch") {
    v1::SubmitBatchRequest r;
    *r.add_commands() = SidecarCommand(kSubmitted, kAccount);
    return r.SerializeAsString();
  }
  if (method == "/eonce.v1.Sidecar/Reconcile") {
    v1::ReconcileRequest r;
    r.set_command_id(kSubmitted);
    return r.SerializeAsString();
  }
  if (method == "/eonce.v1.SidecarAdmin/ListParked") {
    v1::ListParkedRequest r;
    r.set_limit(100);
    return r.SerializeAsString();
  }
  if (method == "/eonce.v1.SidecarAdmin/QueryAudit") {
    v1::QueryAuditRequest r;
    r.set_command_id(kSubmitted);
    return r.SerializeAsString();
  }
  if (method == "/eonce.v1.SidecarAdmin/ResolveParked") {
    v1::ResolveParkedRequest r;
    r.set_idempotency_key(SidecarCommand(kSubmitted, kAccount).idempotency_key());
    r.set_applied(false);
    r.set_operator_note("matrix");
    return r.SerializeAsString();
  }
  if (method == "/eonce.ledger.v1.Ledger/OpenAccount") return OpenAccountRequest(kAccount, 5);
  if (method == "/eonce.ledger.v1.Ledger/Transfer") {
    ledger::v1::TransferRequest r;
    r.set_from(kAccount);
    r.set_to(kSecondAccount);
    r.set_amount(1);
    return r.SerializeAsString();
  }
  if (method == "/eonce.ledger.v1.Ledger/Credit") {
    ledger::v1::CreditRequest r;
    r.set_to(kAccount);
    r.set_from(kSecondAccount);
    r.set_amount(1);
    return r.SerializeAsString();
  }
  if (method == "/eonce.ledger.v1.Ledger/GetAccount") {
    ledger::v1::GetAccountRequest r;
    r.set_id(kAccount);
    return r.SerializeAsString();
  }
  if (method == "/eonce.v1.Outcome/QueryOutcome" || method == "/eonce.v1.SidecarAdmin/QueryOutcome") {
    v1::QueryOutcomeRequest r;
    r.set_command_id(kSubmitted);
    return r.SerializeAsString();
  }
  if (method == "/eonce.v1.Effects/ListEffects" || method == "/eonce.v1.SidecarAdmin/ListEffects") {
    v1::ListEffectsRequest r;
    r.set_limit(1000);
    return r.SerializeAsString();
  }
  if (method == "/eonce.v1.FollowUps/PullFollowUps") {
    v1::PullFollowUpsRequest r;
    r.set_limit(10);
    return r.SerializeAsString();
  }
  if (method == "/eonce.v1.FollowUps/AckFollowUps") {
    v1::AckFollowUpsRequest r;
    r.add_ids("matrix");
    return r.SerializeAsString();
  }
  if (method == "/eonce.v1.SlotData/ExportSlotData") {
    v1::ExportSlotDataRequest r;
    r.set_first_slot(slot);
    r.set_last_slot(slot);
    r.set_limit(100);
    return r.SerializeAsString();
  }
  if (method == "/eonce.v1.SlotData/ImportSlotData") {
    v1::ImportSlotDataRequest r;
    r.set_first_slot(slot);
    r.set_last_slot(slot);
    return r.SerializeAsString();
  }
  if (method == "/eonce.v1.SlotData/DropSlotData") {
    v1::DropSlotDataRequest r;
    r.set_first_slot(slot);
    r.set_last_slot(slot);
    return r.SerializeAsString();
  }
  if (method == "/eonce.v1.SlotData/HoldSlotData") {
    v1::HoldSlotDataRequest r;
    r.set_first_slot(slot);
    r.set_last_slot(slot);
    r.set_epoch(1);
    return r.SerializeAsString();
  }
  if (method == "/eonce.v1.Forwards/ForwardBatch") {
    // A forward that names the victim's tenant: money into its account.
    ledger::v1::CreditRequest credit;
    credit.set_to(kAccount);
    credit.set_from(kSecondAccount);
    credit.set_amount(1'000);
    v1::ForwardBatchRequest r;
    v1::ForwardedCall* forged = r.add_calls();
    forged->set_method("/eonce.ledger.v1.Ledger/Credit");
    forged->set_request(credit.SerializeAsString());
    forged->set_command_id(absl::StrCat("forged-", call));
    forged->set_tenant(kVictim);
    forged->set_actor("matrix");
    return r.SerializeAsString();
  }
  if (method == "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo") {
    internal::reflection::ServerReflectionRequest r;
    r.set_list_services("*");
    return r.SerializeAsString();
  }
  return "";
}

}  // namespace eonce::authz
