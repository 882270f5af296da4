// sidecarctl: the operator's view of a dedupe sidecar, within one tenant.
//
//   sidecarctl --sidecar=ADDR --tenant=T info
//   sidecarctl ... reconcile (--command_id=ID | --key=KEY)
//   sidecarctl ... audit (--command_id=ID | --key=KEY)
//   sidecarctl ... verify                       checks the audit hash chain; exit 1 if broken
//   sidecarctl ... parked
//   sidecarctl ... resolve --key=KEY (--applied | --not_applied) --note="why"
//   sidecarctl ... effects [--after=SEQ]        the business's effects of the tenant
//   sidecarctl ... outcome --command_id=ID      what the business's inbox holds for it
#include <chrono>
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/escaping.h"
#include "common/base/clock.h"
#include "common/base/flags.h"
#include "common/rpc/tls_flags.h"
#include "eonce/v1/sidecar.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

ABSL_FLAG(std::string, sidecar, "127.0.0.1:7100", "the sidecar's address");
ABSL_FLAG(std::string, tenant, "", "the tenant to act within (required)");
ABSL_FLAG(std::string, operator_name, "",
          "who you are as an operator, without mutual TLS (development); with it, your "
          "certificate says");
ABSL_FLAG(std::string, command_id, "", "a command id");
ABSL_FLAG(std::string, key, "", "an idempotency key");
ABSL_FLAG(bool, applied, false, "resolve: the business did apply the command");
ABSL_FLAG(bool, not_applied, false, "resolve: the business did not apply it; free the key");
ABSL_FLAG(std::string, note, "", "resolve: why, kept in the audit log");
ABSL_FLAG(uint64_t, after, 0, "effects: start after this sequence number");

namespace {

std::unique_ptr<grpc::ClientContext> Context() {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(eonce::WallIn(10'000));
  context->AddMetadata("eonce-tenant", absl::GetFlag(FLAGS_tenant));
  context->AddMetadata("eonce-actor", "sidecarctl");
  if (!absl::GetFlag(FLAGS_operator_name).empty()) {
    context->AddMetadata("eonce-operator", absl::GetFlag(FLAGS_operator_name));
  }
  return context;
}

int Fail(const grpc::Status& status) {
  std::cerr << "sidecarctl: " << status.error_code() << " " << status.error_message() << "\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<char*> args = eonce::ParseFlags(
      argc, argv,
      {"sidecarctl --sidecar=ADDR --tenant=T "
       "info|slots|reconcile|audit|verify|parked|resolve|effects|outcome"});
  if (args.size() < 2 || absl::GetFlag(FLAGS_tenant).empty()) {
    std::cerr << absl::ProgramUsageMessage() << "\n";
    return 2;
  }
  auto channel = grpc::CreateChannel(absl::GetFlag(FLAGS_sidecar),
                                     eonce::ChannelCredentials(eonce::TlsFilesFromFlags()));
  auto sidecar = eonce::v1::Sidecar::NewStub(channel);
  auto admin = eonce::v1::SidecarAdmin::NewStub(channel);
  std::string verb = args[1];
  const std::string id = absl::GetFlag(FLAGS_command_id);
  const std::string key = absl::GetFlag(FLAGS_key);

  if (verb == "info") {
    eonce::v1::GetInfoResponse info;
    auto context = Context();
    grpc::Status status = sidecar->GetInfo(context.get(), eonce::v1::GetInfoRequest(), &info);
    if (!status.ok()) return Fail(status);
    std::cout << info.DebugString();
    return 0;
  }
  if (verb == "slots") {
    // The slot map this sidecar holds: its epoch, which runs of slots go where, what moves.
    eonce::v1::SlotMap map;
    auto context = Context();
    grpc::Status status = sidecar->GetSlotMap(context.get(), eonce::v1::GetSlotMapRequest(), &map);
    if (!status.ok()) return Fail(status);
    std::cout << "epoch " << map.epoch() << "\n";
    for (const auto& shard : map.shards()) {
      std::cout << "shard " << shard.id() << " " << shard.address() << "\n";
    }
    for (const auto& range : map.ranges()) {
      std::cout << "slots " << range.first() << "-" << range.last() << " " << range.shard() << "\n";
    }
    for (const auto& move : map.migrations()) {
      std::cout << "moving " << move.first() << "-" << move.last() << " " << move.from_shard()
                << " -> " << move.to_shard() << (move.flipped() ? " (flipped, to release)" : "")
                << "\n";
    }
    return 0;
  }
  if (verb == "reconcile") {
    eonce::v1::ReconcileRequest request;
    if (!id.empty()) request.set_command_id(id); else request.set_idempotency_key(key);
    eonce::v1::ReconcileResponse response;
    auto context = Context();
    grpc::Status status = sidecar->Reconcile(context.get(), request, &response);
    if (!status.ok()) return Fail(status);
    std::cout << eonce::v1::RecordState_Name(response.state()) << " key=" << response.idempotency_key()
              << " command_id=" << response.command_id()
              << " result_code=" << response.result().code() << "\n";
    return 0;
  }
  if (verb == "audit") {
    eonce::v1::QueryAuditRequest request;
    if (!id.empty()) request.set_command_id(id); else request.set_idempotency_key(key);
    request.set_limit(1000);
    eonce::v1::QueryAuditResponse response;
    auto context = Context();
    grpc::Status status = admin->QueryAudit(context.get(), request, &response);
    if (!status.ok()) return Fail(status);
    for (const auto& e : response.events()) {
      std::cout << e.seq() << " " << e.at_ms() << " " << e.decision() << " " << e.result()
                << " command_id=" << e.command_id() << " key=" << e.idempotency_key()
                << " actor=" << e.actor() << " token=" << e.fencing_token()
                << " hash=" << absl::BytesToHexString(e.hash()).substr(0, 16)
                << (e.trace_id().empty() ? "" : " trace=" + e.trace_id()) << "\n";
    }
    return 0;
  }
  if (verb == "verify") {
    // Page by page (each call is bounded by the sidecar); at most 100,000 pages.
    uint64_t checked = 0;
    eonce::v1::VerifyAuditRequest request;
    for (int page = 0; page < 100'000; ++page) {
      eonce::v1::VerifyAuditResponse response;
      auto context = Context();
      grpc::Status status = admin->VerifyAudit(context.get(), request, &response);
      if (!status.ok()) return Fail(status);
      checked += response.events_checked();
      if (!response.ok()) {
        std::cout << "audit chain BROKEN at event " << response.first_bad_seq() << ": "
                  << response.problem() << " (" << checked << " events checked before it)\n";
        return 1;
      }
      if (response.next_after_seq() == 0) break;
      request.set_after_seq(response.next_after_seq());
    }
    std::cout << "audit chain intact: " << checked << " events\n";
    return 0;
  }
  if (verb == "parked") {
    eonce::v1::ListParkedRequest request;
    request.set_limit(1000);
    eonce::v1::ListParkedResponse response;
    auto context = Context();
    grpc::Status status = admin->ListParked(context.get(), request, &response);
    if (!status.ok()) return Fail(status);
    for (const auto& p : response.records()) {
      std::cout << p.idempotency_key() << " command_id=" << p.command_id() << " "
                << p.target_method() << " actor=" << p.actor()
                << " first_seen_ms=" << p.first_seen_ms() << "\n";
    }
    return 0;
  }
  if (verb == "resolve") {
    if (key.empty() || absl::GetFlag(FLAGS_applied) == absl::GetFlag(FLAGS_not_applied) ||
        absl::GetFlag(FLAGS_note).empty()) {
      std::cerr << "sidecarctl: resolve needs --key, one of --applied or --not_applied, and --note\n";
      return 2;
    }
    eonce::v1::ResolveParkedRequest request;
    request.set_idempotency_key(key);
    request.set_applied(absl::GetFlag(FLAGS_applied));
    request.set_operator_note(absl::GetFlag(FLAGS_note));
    eonce::v1::ResolveParkedResponse response;
    auto context = Context();
    grpc::Status status = admin->ResolveParked(context.get(), request, &response);
    if (!status.ok()) return Fail(status);
    std::cout << "resolved: " << eonce::v1::RecordState_Name(response.state()) << "\n";
    return 0;
  }
  if (verb == "effects") {
    // One page of at most 10,000; --after= the last sequence number shown for the next.
    eonce::v1::ListEffectsRequest request;
    request.set_after_seq(absl::GetFlag(FLAGS_after));
    request.set_limit(10'000);
    eonce::v1::ListEffectsResponse response;
    auto context = Context();
    grpc::Status status = admin->ListEffects(context.get(), request, &response);
    if (!status.ok()) return Fail(status);
    for (const auto& e : response.effects()) {
      std::cout << e.seq() << " " << (e.command_id().empty() ? "-" : e.command_id()) << " "
                << e.entity() << " " << e.method() << " amount=" << e.amount()
                << " revision=" << e.revision() << "\n";
    }
    std::cout << "last_seq " << response.last_seq() << "\n";
    return 0;
  }
  if (verb == "outcome") {
    if (id.empty()) {
      std::cerr << "sidecarctl: outcome needs --command_id\n";
      return 2;
    }
    eonce::v1::QueryOutcomeRequest request;
    request.set_command_id(id);
    eonce::v1::QueryOutcomeResponse response;
    auto context = Context();
    grpc::Status status = admin->QueryOutcome(context.get(), request, &response);
    if (!status.ok()) return Fail(status);
    std::cout << (response.applied() ? "applied" : "not applied")
              << " result_code=" << response.result().code()
              << " applied_at_ms=" << response.applied_at_ms() << "\n";
    return 0;
  }
  std::cerr << "sidecarctl: unknown command " << verb << "\n";
  return 2;
}
