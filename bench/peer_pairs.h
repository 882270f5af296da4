// eonce bench, the peers: first seen and duplicates through the sidecar, each run of them
// paired with a run of a throwaway Postgres idempotency table and of a Redis claim
// (bench/peers.py), so that a ratio compares runs seconds apart on a machine whose speed
// drifts by half within minutes.
//
// The servers are started and stopped outside the bench (`peers.py start` / `stop`, which
// ./eonce bench --peers wraps around it, also on failure); the bench runs one
// `peers.py measure` per peer run against them, while its own stack is idle.
#ifndef EONCE_BENCH_PEER_PAIRS_H_
#define EONCE_BENCH_PEER_PAIRS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "bench/loops.h"
#include "bench/plot.h"
#include "eonce/v1/sidecar.grpc.pb.h"

namespace eonce::bench {

// One flow at one client count: eonce's median run, with paired_ratio (and its min and
// max) over Postgres's run just before each of its runs, and paired_reference_ratio over
// Redis's.
struct PeerPair {
  std::string flow;  // "first_seen" or "duplicate"
  int clients = 0;
  int pairs = 0;
  Figures eonce;
};

// Runs `python3 <script> measure --state <state> PEER FLOW N --seconds S`, one run each.
class PeerRunner {
 public:
  PeerRunner(std::string script, std::string state_dir)
      : script_(std::move(script)), state_dir_(std::move(state_dir)) {}
  // One run of `peer` ("postgres", "redis"); zero ops_per_s and one error when it failed
  // (a failed run counts in no pair).
  Figures Run(const std::string& peer, const std::string& flow, int clients,
              double seconds) const;

 private:
  std::string script_;
  std::string state_dir_;
};

// For each client count in `points`, first seen (new command ids, one Submit each, two
// hops) and then duplicates (the retries of that first seen's warm-up), each in
// max(`pairs`, 1) triples: a Postgres run, a Redis run, an eonce run.
absl::Status BenchPeers(const MeasureOptions& measure, const std::vector<int>& points,
                        int pairs, v1::Sidecar::Stub& sidecar, int accounts,
                        const PeerRunner& peers, std::vector<PeerPair>* out);

// What the chart shows of them: eonce's, Postgres's and Redis's median rates.
std::vector<PeerBars> PeerBarsOf(const std::vector<PeerPair>& pairs);

// The pairs as a JSON array (latest.json's "peer_pairs"), and as the lines the bench
// prints beside its table.
std::string PeerPairsJson(const std::vector<PeerPair>& pairs);
std::string PeerPairsText(const std::vector<PeerPair>& pairs);

}  // namespace eonce::bench

#endif  // EONCE_BENCH_PEER_PAIRS_H_
