// explain: one command's journey across eonce (tools/explain/explainer.h).
//
//   explain --agent=ADDR[,ADDR] --sidecar=ADDR[,ADDR] [--tenant=T] [--operator_name=N]
//           [--json] COMMAND_ID_OR_KEY
//
// Exit codes: 0 the command was found (whatever its verdict); 2 bad usage or a malformed
// id; 3 no component knows it; 4 not found, and some component could not be read.
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_split.h"
#include "common/base/flags.h"
#include "common/rpc/tls_flags.h"
#include "tools/explain/explainer.h"
#include "tools/explain/grpc_views.h"
#include "tools/explain/render.h"

ABSL_FLAG(std::string, agent, "", "the outbox agent(s) to ask, comma-separated");
ABSL_FLAG(std::string, sidecar, "",
          "the sidecar(s) to ask, comma-separated; a sharded sidecar's slot map adds every "
          "shard it names");
ABSL_FLAG(std::string, tenant, "acme", "the tenant the command belongs to");
ABSL_FLAG(std::string, operator_name, "oncall",
          "who you are as an operator, without mutual TLS (development); with it, your "
          "certificate says");
ABSL_FLAG(bool, json, false, "print the journey as one JSON object");
ABSL_FLAG(int64_t, timeout_ms, 5'000, "the deadline of each call");

int main(int argc, char** argv) {
  std::vector<char*> args = eonce::ParseFlags(
      argc, argv,
      {"explain --agent=ADDR --sidecar=ADDR [--tenant=T] [--json] COMMAND_ID_OR_KEY"});
  if (args.size() != 2 ||
      (absl::GetFlag(FLAGS_agent).empty() && absl::GetFlag(FLAGS_sidecar).empty())) {
    std::cerr << absl::ProgramUsageMessage() << "\n";
    return 2;
  }
  eonce::explain::Caller caller;
  caller.tenant = absl::GetFlag(FLAGS_tenant);
  caller.operator_name = absl::GetFlag(FLAGS_operator_name);
  caller.tls = eonce::TlsFilesFromFlags();
  caller.timeout_ms = absl::GetFlag(FLAGS_timeout_ms);

  std::vector<std::unique_ptr<eonce::explain::AgentView>> agents;
  std::vector<eonce::explain::AgentView*> agent_views;
  for (absl::string_view a : absl::StrSplit(absl::GetFlag(FLAGS_agent), ',', absl::SkipEmpty())) {
    agents.push_back(eonce::explain::NewGrpcAgentView(std::string(a), caller));
    agent_views.push_back(agents.back().get());
  }
  std::vector<std::unique_ptr<eonce::explain::ShardView>> shards;
  std::vector<eonce::explain::ShardView*> shard_views;
  std::vector<std::string> given =
      absl::StrSplit(absl::GetFlag(FLAGS_sidecar), ',', absl::SkipEmpty());
  for (const std::string& s : eonce::explain::ExpandShards(given, caller)) {
    shards.push_back(eonce::explain::NewGrpcShardView(s, caller));
    shard_views.push_back(shards.back().get());
  }

  eonce::explain::ExplainOptions options;
  options.tenant = caller.tenant;
  options.resolve_hint = "sidecarctl --sidecar=" + (given.empty() ? "ADDR" : given.front()) +
                         " --tenant=" + caller.tenant + " --operator_name=" +
                         (caller.operator_name.empty() ? "YOU" : caller.operator_name);
  auto journey = eonce::explain::Explain(args[1], options, agent_views, shard_views);
  if (!journey.ok()) {
    std::cerr << "explain: " << journey.status() << "\n";
    return 2;
  }
  if (journey->verdict() == eonce::v1::VERDICT_NOT_FOUND) {
    std::cerr << "explain: NOT_FOUND: no component knows command id or key \"" << args[1]
              << "\" in tenant " << caller.tenant << "\n";
    for (const std::string& u : journey->unread()) std::cerr << "  could not read " << u << "\n";
    if (absl::GetFlag(FLAGS_json)) std::cout << eonce::explain::RenderJson(*journey);
    return journey->unread().empty() ? 3 : 4;
  }
  std::cout << (absl::GetFlag(FLAGS_json) ? eonce::explain::RenderJson(*journey)
                                          : eonce::explain::RenderText(*journey));
  return 0;
}
