// effectsctl: reads a business service's effect ledger.
//
//   effectsctl --service=ADDR --operator_name=ME              every effect, one a line
//   effectsctl --service=ADDR --operator_name=ME --counts     effects per (tenant, command
//                                          id); exits 1 if any command has more than one
//
// A business port admits operators and eonce components only: effectsctl is an operator.
// With mutual TLS (--tls_cert, ...) the operator certificate says who, and for which
// tenant; without it --operator_name says who, and --tenant (empty: every tenant) for whom.
#include <chrono>
#include <iostream>
#include <map>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "common/base/clock.h"
#include "common/command/command.h"
#include "common/base/flags.h"
#include "common/rpc/tls_flags.h"
#include "eonce/v1/outcome.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

ABSL_FLAG(std::string, service, "127.0.0.1:7101", "the business service's address");
ABSL_FLAG(bool, counts, false,
          "print effects per (tenant, command id) and flag duplicates");
ABSL_FLAG(uint64_t, after, 0, "start after this sequence number");
ABSL_FLAG(std::string, operator_name, "",
          "who you are as an operator, without mutual TLS (the pod's socket, local "
          "development; required there); with it, your certificate says so");
ABSL_FLAG(std::string, tenant, "",
          "the tenant whose effects to read; empty: every tenant (without mutual TLS; an "
          "operator's certificate keeps it to its own tenant)");

int main(int argc, char** argv) {
  eonce::ParseFlags(argc, argv, {"effectsctl --service=ADDR --operator_name=ME [--counts] "
                                 "[--after=SEQ] [--tenant=T]"});
  const eonce::TlsFiles tls = eonce::TlsFilesFromFlags();
  if (!tls.enabled() && absl::GetFlag(FLAGS_operator_name).empty()) {
    std::cerr << "effectsctl: --operator_name: required without mutual TLS (a business port "
                 "admits operators and eonce components only)\n";
    return 2;
  }
  auto stub = eonce::v1::Effects::NewStub(
      grpc::CreateChannel(absl::GetFlag(FLAGS_service), eonce::ChannelCredentials(tls)));
  // A command id is unique within its tenant: two tenants may use the same one.
  std::map<std::pair<std::string, std::string>, int> per_command;
  uint64_t after = absl::GetFlag(FLAGS_after);
  int64_t total = 0;
  // Bounded: at most 10,000 pages of 10,000 effects.
  for (int page = 0; page < 10'000; ++page) {
    grpc::ClientContext context;
    context.set_deadline(eonce::WallIn(10'000));
    if (!absl::GetFlag(FLAGS_operator_name).empty()) {
      context.AddMetadata(eonce::kOperatorHeader, absl::GetFlag(FLAGS_operator_name));
    }
    if (!absl::GetFlag(FLAGS_tenant).empty()) {
      context.AddMetadata(eonce::kTenantHeader, absl::GetFlag(FLAGS_tenant));
    }
    eonce::v1::ListEffectsRequest request;
    request.set_after_seq(after);
    request.set_limit(10'000);
    eonce::v1::ListEffectsResponse response;
    grpc::Status status = stub->ListEffects(&context, request, &response);
    if (!status.ok()) {
      std::cerr << "effectsctl: " << status.error_message() << "\n";
      return 2;
    }
    for (const auto& e : response.effects()) {
      ++total;
      per_command[{e.tenant(), e.command_id()}]++;
      if (!absl::GetFlag(FLAGS_counts)) {
        std::cout << e.seq() << " " << (e.command_id().empty() ? "-" : e.command_id()) << " "
                  << e.tenant() << " " << e.entity() << " " << e.method() << " amount="
                  << e.amount() << " revision=" << e.revision()
                  << (e.trace_id().empty() ? "" : " trace=" + e.trace_id() + " span=" + e.span_id())
                  << "\n";
      }
    }
    if (response.effects_size() < 10'000) break;
    after = response.last_seq();
  }
  if (!absl::GetFlag(FLAGS_counts)) return 0;
  int duplicated = 0;
  for (const auto& [command, n] : per_command) {
    const auto& [tenant, id] = command;
    if (n > 1 && !id.empty()) {
      ++duplicated;
      std::cout << "DUPLICATE " << (tenant.empty() ? "-" : tenant) << " " << id << " " << n
                << "\n";
    }
  }
  std::cout << "effects " << total << " commands " << per_command.size() << " duplicated "
            << duplicated << "\n";
  return duplicated == 0 ? 0 : 1;
}
