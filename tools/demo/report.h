// What a demo run counted, and the report it prints: a table, then one machine-readable
// summary line (what ./eonce demo --quiet prints and the README shows); and the progress
// bar it shows meanwhile.
#ifndef EONCE_TOOLS_DEMO_REPORT_H_
#define EONCE_TOOLS_DEMO_REPORT_H_

#include <cstdint>
#include <map>
#include <string>

#include "eonce/v1/agent.grpc.pb.h"

namespace eonce::demo {

// What a run counted, for the report.
struct Figures {
  int64_t commands = 0;      // enqueued through the agent
  int64_t direct_calls = 0;  // sent by a plain gRPC client through the legacy sidecar
  int64_t agent_duplicates = 0;
  int64_t attempts = 0;
  int64_t replayed_by_sidecar = 0;
  int64_t effects = 0;
  int64_t conflicts = 0;
  int64_t rejected = 0;
  int64_t dead_letters = 0;
  int64_t parked = 0;
  int64_t lost = 0;
  int64_t duplicate_effects = 0;
  int64_t balance = 0;
  int64_t minted = 0;
  bool conserved = false;
  bool settled = false;
  int64_t shards = 1;       // the ledger's sidecars (./eonce demo --shards N)
  int64_t reshards = 0;     // slot moves finished during the run
  int64_t cross_shard = 0;  // transfers between accounts whose slots two shards owned
  int64_t credits = 0;      // credits relayed between the ledger's shards (their effects)
};

// The agent's records by state ("acked", "queued", ...); empty when it cannot be asked.
std::map<std::string, int64_t> Counts(v1::Agent::Stub& agent);
// The records in the final states a run ends in (all but dropped), from Counts.
int64_t Finished(std::map<std::string, int64_t>& counts);
// A progress bar of `final_count` out of `total`, with the counts by state.
std::string Bar(const std::map<std::string, int64_t>& counts, int64_t final_count, int64_t total);

// The report: a table (unless `quiet`), then the one machine-readable summary line.
void Report(const Figures& figures, bool quiet);

}  // namespace eonce::demo

#endif  // EONCE_TOOLS_DEMO_REPORT_H_
