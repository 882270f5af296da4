// outboxctl: the operator's view of an outbox agent.
//
//   outboxctl [--agent=ADDR] list [STATE] [--limit=N]
//   outboxctl show COMMAND_ID
//   outboxctl requeue COMMAND_ID
//   outboxctl drop COMMAND_ID --why="reason"
//   outboxctl stats
//   outboxctl credential --epoch=N [--revoked]
// requeue, drop and credential need an operator of the agent's tenant: an operator
// certificate (--tls_*), or --operator on a plaintext (development) agent.
#include <chrono>
#include <iostream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "common/command/command.h"
#include "common/base/flags.h"
#include "common/rpc/tls_flags.h"
#include "eonce/v1/agent.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

ABSL_FLAG(std::string, agent, "127.0.0.1:7000", "the agent's address");
ABSL_FLAG(int32_t, limit, 50, "records to list (at most 1000)");
ABSL_FLAG(std::string, why, "", "drop: the reason, kept in the record's history");
ABSL_FLAG(int64_t, epoch, 0, "credential: the new epoch");
ABSL_FLAG(bool, revoked, false, "credential: revoke");
ABSL_FLAG(std::string, operator, "",
          "requeue, drop, credential on a plaintext agent: the operator to state "
          "(eonce-operator); under mutual TLS the operator certificate says it");

namespace {

using eonce::v1::OutboxRecord;

std::string Time(int64_t ms) {
  return absl::FormatTime("%Y-%m-%d %H:%M:%E3S", absl::FromUnixMillis(ms), absl::UTCTimeZone());
}

void PrintLine(const OutboxRecord& r) {
  std::cout << r.command().command_id() << "  " << eonce::v1::OutboxState_Name(r.state())
            << "  attempt=" << r.attempt() << "  " << r.command().target_method() << "  "
            << r.command().entity().type() << "/" << r.command().entity().id();
  if (!r.last_error().reason().empty()) std::cout << "  last=" << r.last_error().reason();
  std::cout << "\n";
}

void PrintRecord(const OutboxRecord& r) {
  const auto& c = r.command();
  std::cout << "command_id:      " << c.command_id() << "\n"
            << "idempotency_key: " << c.idempotency_key() << "\n"
            << "state:           " << eonce::v1::OutboxState_Name(r.state()) << "\n"
            << "operation:       " << c.target_method() << "\n"
            << "entity:          " << c.entity().type() << "/" << c.entity().id() << "\n"
            << "tenant/actor:    " << c.tenant() << " / " << c.actor() << "\n"
            << "request bytes:   " << c.request().size() << "\n"
            << "attempt:         " << r.attempt() << "\n"
            << "created:         " << Time(r.created_at_ms()) << "\n"
            << "updated:         " << Time(r.updated_at_ms()) << "\n"
            << "next attempt:    " << Time(r.next_attempt_at_ms()) << "\n"
            << "credential epoch " << c.credential_epoch() << "\n";
  if (!c.trace().traceparent().empty()) {
    std::cout << "traceparent:     " << c.trace().traceparent() << "\n";
  }
  if (r.last_error().code() != 0) {
    std::cout << "last error:      code " << r.last_error().code() << " "
              << r.last_error().reason() << ": " << r.last_error().message() << "\n";
  }
  if (r.state() == eonce::v1::ACKED) {
    std::cout << "result:          code " << r.result().code() << ", "
              << r.result().response().size() << " response bytes"
              << (r.replay().replayed() ? " (replayed)" : "") << "\n";
  }
  std::cout << "history:\n";
  for (const auto& t : r.history()) {
    std::cout << "  " << Time(t.at_ms()) << "  " << eonce::v1::OutboxState_Name(t.from())
              << " -> " << eonce::v1::OutboxState_Name(t.to()) << "  " << t.why()
              << (t.span_id().empty() ? "" : "  span " + t.span_id()) << "\n";
  }
  if (r.attempts_size() > 0) std::cout << "attempts (the last 16):\n";
  for (const auto& a : r.attempts()) {
    std::cout << "  " << Time(a.at_ms()) << "  #" << a.attempt() << " code " << a.code() << " "
              << a.reason() << " -> " << eonce::v1::OutboxState_Name(a.state());
    if (a.backoff_ms() > 0) std::cout << ", next in " << a.backoff_ms() << " ms";
    std::cout << "\n";
  }
}

int Fail(const grpc::Status& status) {
  std::cerr << "outboxctl: " << status.error_code() << " " << status.error_message() << "\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<char*> args = eonce::ParseFlags(
      argc, argv,
      {"outboxctl [--agent=ADDR] list [STATE] | show ID | requeue ID | drop ID --why=... | "
       "stats | credential --epoch=N [--revoked]"});
  if (args.size() < 2) {
    std::cerr << absl::ProgramUsageMessage() << "\n";
    return 2;
  }
  auto stub = eonce::v1::Agent::NewStub(grpc::CreateChannel(
      absl::GetFlag(FLAGS_agent), eonce::ChannelCredentials(eonce::TlsFilesFromFlags())));
  grpc::ClientContext context;
  context.set_deadline(eonce::WallIn(10'000));
  if (!absl::GetFlag(FLAGS_operator).empty()) {
    context.AddMetadata(eonce::kOperatorHeader, absl::GetFlag(FLAGS_operator));
  }
  std::string verb = args[1];
  std::string id = args.size() > 2 ? args[2] : "";

  if (verb == "list") {
    eonce::v1::ListRequest request;
    if (!id.empty()) {
      eonce::v1::OutboxState state;
      if (!eonce::v1::OutboxState_Parse(id, &state)) {
        std::cerr << "outboxctl: unknown state " << id << "\n";
        return 2;
      }
      request.set_state(state);
    }
    request.set_limit(absl::GetFlag(FLAGS_limit));
    eonce::v1::ListResponse response;
    grpc::Status status = stub->List(&context, request, &response);
    if (!status.ok()) return Fail(status);
    for (const auto& r : response.records()) PrintLine(r);
    return 0;
  }
  if (verb == "stats") {
    eonce::v1::StatsResponse response;
    grpc::Status status = stub->Stats(&context, eonce::v1::StatsRequest(), &response);
    if (!status.ok()) return Fail(status);
    for (const auto& c : response.counts()) {
      std::cout << eonce::v1::OutboxState_Name(c.state()) << " " << c.count() << "\n";
    }
    std::cout << "oldest_waiting_age_ms " << response.oldest_queued_age_ms() << "\n"
              << "credential_epoch " << response.credential_epoch() << "\n"
              << "revoked " << (response.revoked() ? "true" : "false") << "\n";
    return 0;
  }
  if (verb == "credential") {
    eonce::v1::SetCredentialRequest request;
    request.set_epoch(absl::GetFlag(FLAGS_epoch));
    request.set_revoked(absl::GetFlag(FLAGS_revoked));
    eonce::v1::SetCredentialResponse response;
    grpc::Status status = stub->SetCredential(&context, request, &response);
    if (!status.ok()) return Fail(status);
    std::cout << "epoch " << response.epoch() << " revoked " << response.revoked() << "\n";
    return 0;
  }
  if (id.empty()) {
    std::cerr << "outboxctl: " << verb << " needs a command id\n";
    return 2;
  }
  OutboxRecord record;
  grpc::Status status;
  if (verb == "show") {
    eonce::v1::GetRequest request;
    request.set_command_id(id);
    status = stub->Get(&context, request, &record);
  } else if (verb == "requeue") {
    eonce::v1::RequeueRequest request;
    request.set_command_id(id);
    status = stub->Requeue(&context, request, &record);
  } else if (verb == "drop") {
    if (absl::GetFlag(FLAGS_why).empty()) {
      std::cerr << "outboxctl: drop needs --why, which is kept with the record\n";
      return 2;
    }
    eonce::v1::DropRequest request;
    request.set_command_id(id);
    request.set_why(absl::GetFlag(FLAGS_why));
    status = stub->Drop(&context, request, &record);
  } else {
    std::cerr << "outboxctl: unknown command " << verb << "\n";
    return 2;
  }
  if (!status.ok()) return Fail(status);
  PrintRecord(record);
  return 0;
}
