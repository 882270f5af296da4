#include "tools/demo/report.h"

#include <cctype>
#include <chrono>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "grpcpp/client_context.h"

namespace eonce::demo {

std::string Bar(const std::map<std::string, int64_t>& counts, int64_t final_count, int64_t total) {
  int width = 30;
  int filled = total == 0 ? width : static_cast<int>(width * final_count / total);
  std::string bar = "[" + std::string(filled, '#') + std::string(width - filled, '.') + "]";
  std::string text = absl::StrFormat("%s %5d/%d", bar, final_count, total);
  for (const auto& [state, n] : counts) {
    if (n > 0) absl::StrAppend(&text, " ", state, "=", n);
  }
  return text;
}

std::map<std::string, int64_t> Counts(v1::Agent::Stub& agent) {
  std::map<std::string, int64_t> counts;
  v1::StatsResponse stats;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  if (agent.Stats(&context, v1::StatsRequest(), &stats).ok()) {
    for (const auto& c : stats.counts()) {
      std::string name = v1::OutboxState_Name(c.state());
      for (auto& ch : name) ch = static_cast<char>(std::tolower(ch));
      counts[name] = c.count();
    }
  }
  return counts;
}

int64_t Finished(std::map<std::string, int64_t>& counts) {
  return counts["acked"] + counts["rejected"] + counts["conflict"] + counts["dead_lettered"] +
         counts["expired"];
}


void Report(const Figures& f, bool quiet) {
  if (!quiet) {
    std::printf("\n  commands enqueued          %ld (+%ld duplicate submissions the agent "
                "answered from its outbox)\n", static_cast<long>(f.commands),
                static_cast<long>(f.agent_duplicates));
    std::printf("  attempts sent              %ld\n", static_cast<long>(f.attempts));
    std::printf("  duplicates stopped         %ld by the sidecar, %ld by the agent\n",
                static_cast<long>(f.replayed_by_sidecar), static_cast<long>(f.agent_duplicates));
    std::printf("  business effects applied   %ld\n", static_cast<long>(f.effects));
    std::printf("  conflicts                  %ld (a key reused with another payload)\n",
                static_cast<long>(f.conflicts));
    std::printf("  business rejections        %ld (too little balance, a stale case revision)\n",
                static_cast<long>(f.rejected));
    std::printf("  dead letters               %ld\n", static_cast<long>(f.dead_letters));
    std::printf("  parked unknown outcomes    %ld (legacy service; see SidecarAdmin.ListParked)\n",
                static_cast<long>(f.parked));
    std::printf("  lost commands              %ld\n", static_cast<long>(f.lost));
    std::printf("  duplicate effects          %ld\n", static_cast<long>(f.duplicate_effects));
    std::printf("  ledger total               %ld (minted %ld): %s\n", static_cast<long>(f.balance),
                static_cast<long>(f.minted), f.conserved ? "conserved" : "BROKEN");
    if (f.shards > 1) {
      std::printf("  ledger shards              %ld (slot moves during the run: %ld; transfers "
                  "across shards: %ld)\n",
                  static_cast<long>(f.shards), static_cast<long>(f.reshards),
                  static_cast<long>(f.cross_shard));
      std::printf("  credits between shards     %ld applied once each (a debit's follow-up, "
                  "relayed from its ledger's outbox; counted in the effects)\n",
                  static_cast<long>(f.credits));
    }
    if (!f.settled) std::printf("  NOT SETTLED within the timeout\n");
  }
  std::printf(
      "summary: commands=%ld attempts=%ld duplicates_stopped=%ld effects=%ld conflicts=%ld "
      "rejected=%ld dead_letters=%ld parked_unknown=%ld lost=%ld duplicate_effects=%ld "
      "ledger_conserved=%s reshards=%ld cross_shard=%ld\n",
      static_cast<long>(f.commands + f.direct_calls), static_cast<long>(f.attempts),
      static_cast<long>(f.agent_duplicates + f.replayed_by_sidecar), static_cast<long>(f.effects),
      static_cast<long>(f.conflicts), static_cast<long>(f.rejected),
      static_cast<long>(f.dead_letters), static_cast<long>(f.parked), static_cast<long>(f.lost),
      static_cast<long>(f.duplicate_effects), f.conserved ? "true" : "false",
      static_cast<long>(f.reshards), static_cast<long>(f.cross_shard));
  std::fflush(stdout);
}

}  // namespace eonce::demo
