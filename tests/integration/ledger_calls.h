// What the tests of a real sidecar in front of the real ledger share: the sidecar's
// options, the commands they send (as alice, on account "a"), a Submit through the
// sidecar, and reads of the ledger's effect ledger and balances, straight from the ledger
// (as the eonce component "checker": a business port admits no one else).
#ifndef EONCE_TESTS_INTEGRATION_LEDGER_CALLS_H_
#define EONCE_TESTS_INTEGRATION_LEDGER_CALLS_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/command/command.h"
#include "common/rpc/grpc_status.h"
#include "common/rpc/submit_batcher.h"
#include "dedupe_sidecar/doors/sidecar_service.h"
#include "eonce/ledger/v1/ledger.grpc.pb.h"
#include "eonce/v1/outcome.grpc.pb.h"
#include "eonce/v1/sidecar.grpc.pb.h"

namespace eonce::testing {

inline constexpr char kTransferMethod[] = "/eonce.ledger.v1.Ledger/Transfer";
inline constexpr char kOpenAccountMethod[] = "/eonce.ledger.v1.Ledger/OpenAccount";

// A sidecar on `data_dir` in front of the ledger on loopback `ledger_port`, with leases and
// timeouts short enough for a test to see recovery.
inline SidecarServerOptions SidecarOptionsFor(int ledger_port, const std::string& data_dir) {
  SidecarServerOptions options;
  options.data_dir = data_dir;
  options.upstream_address = "127.0.0.1:" + std::to_string(ledger_port);
  options.deduper.lease_ms = 2'000;
  options.deduper.forward_timeout_ms = 1'000;
  options.deduper.outcome_query_timeout_ms = 500;
  return options;
}

// A command of alice's on `account` ("a" unless named); the key is derived unless given.
inline v1::Command LedgerCommand(const std::string& id, const std::string& method,
                                 const std::string& request, const std::string& key = "",
                                 const std::string& account = "a") {
  v1::Command c;
  c.set_command_id(id);
  c.set_target_method(method);
  c.set_request(request);
  c.set_actor("alice");
  c.mutable_entity()->set_type("account");
  c.mutable_entity()->set_id(account);
  c.set_idempotency_key(key.empty() ? DeriveIdempotencyKey(c) : key);
  FillPayloadHash(&c);
  return c;
}

// Alice opens account `id` with `balance` ("open-<id>", a command on that account).
inline v1::Command OpenAccountCommand(const std::string& id, int64_t balance) {
  ledger::v1::OpenAccountRequest open;
  open.set_id(id);
  open.set_initial_balance(balance);
  return LedgerCommand("open-" + id, kOpenAccountMethod, open.SerializeAsString(), "", id);
}

inline ledger::v1::TransferRequest AToB(int64_t amount) {
  ledger::v1::TransferRequest t;
  t.set_from("a");
  t.set_to("b");
  t.set_amount(amount);
  return t;
}

// A transfer of `amount` from "a" to "b".
inline v1::Command TransferCommand(const std::string& id, int64_t amount,
                                   const std::string& key = "") {
  return LedgerCommand(id, kTransferMethod, AToB(amount).SerializeAsString(), key);
}

// Submit as workload "agent" of `tenant` (development headers), with a 10 s deadline.
inline absl::StatusOr<v1::SubmitResponse> SubmitTo(v1::Sidecar::Stub& sidecar,
                                                   const v1::Command& c,
                                                   const std::string& tenant = "acme") {
  grpc::ClientContext context;
  context.AddMetadata(kTenantHeader, tenant);
  context.AddMetadata(kActorHeader, "agent");
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::SubmitRequest request;
  *request.mutable_command() = c;
  v1::SubmitResponse response;
  grpc::Status status = sidecar.Submit(&context, request, &response);
  if (!status.ok()) return FromGrpcStatus(status, &context);
  return response;
}

// SubmitBatch as SubmitTo submits: the call's status, else each command's answer in order.
inline absl::StatusOr<std::vector<absl::StatusOr<v1::SubmitResponse>>> SubmitBatchTo(
    v1::Sidecar::Stub& sidecar, const std::vector<v1::Command>& commands,
    const std::string& tenant = "acme") {
  grpc::ClientContext context;
  context.AddMetadata(kTenantHeader, tenant);
  context.AddMetadata(kActorHeader, "agent");
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::SubmitBatchRequest request;
  for (const v1::Command& c : commands) *request.add_commands() = c;
  v1::SubmitBatchResponse response;
  grpc::Status status = sidecar.SubmitBatch(&context, request, &response);
  if (!status.ok()) return FromGrpcStatus(status, &context);
  return SubmitBatcher::AnswersOf(response);
}

// How many effects the ledger holds for `command_id`; -1 if it cannot be read.
inline int EffectsOf(v1::Effects::Stub& effects, const std::string& command_id) {
  grpc::ClientContext context;
  context.AddMetadata(kComponentHeader, "checker");
  v1::ListEffectsRequest request;
  request.set_limit(10000);
  v1::ListEffectsResponse response;
  if (!effects.ListEffects(&context, request, &response).ok()) return -1;
  int n = 0;
  for (const auto& e : response.effects()) n += e.command_id() == command_id;
  return n;
}

// The balance of account `id`; -1 if it cannot be read.
inline int64_t BalanceOf(ledger::v1::Ledger::Stub& ledger, const std::string& id) {
  grpc::ClientContext context;
  context.AddMetadata(kComponentHeader, "checker");
  ledger::v1::GetAccountRequest request;
  request.set_id(id);
  ledger::v1::Account account;
  if (!ledger.GetAccount(&context, request, &account).ok()) return -1;
  return account.balance();
}

}  // namespace eonce::testing

#endif  // EONCE_TESTS_INTEGRATION_LEDGER_CALLS_H_
