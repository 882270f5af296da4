// What really happened, read from the running components over gRPC: every record the
// agent holds, every effect a service's effect ledger holds, and the ledger's money. The
// demo, the fault tests and the benchmarks judge a run with these, the same way.
#ifndef EONCE_TESTS_UTIL_GROUND_TRUTH_H_
#define EONCE_TESTS_UTIL_GROUND_TRUTH_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "eonce/ledger/v1/ledger.pb.h"
#include "eonce/v1/agent.grpc.pb.h"

namespace eonce::testing {

// Every record the agent holds, by command id, page by page; the first page that fails
// fails it all (a partial listing would hide records).
absl::StatusOr<std::map<std::string, v1::OutboxRecord>> AllRecords(v1::Agent::Stub& agent);

// How many effects each command id has in the effect ledger of the service at `address`
// (plaintext, loopback or a unix socket), page by page, every tenant's: read as the eonce
// component "checker".
absl::StatusOr<std::map<std::string, int>> EffectsByCommand(const std::string& address);

// The ledger's total balance and the money it minted (equal when money is conserved).
absl::StatusOr<ledger::v1::GetTotalResponse> LedgerTotal(const std::string& address);

// A sharded ledger, one address a shard: every effect by command id, summed over the
// shards (so a command applied on two shards counts two), and GetTotal's figures summed.
// An error if one shard cannot be read.
absl::StatusOr<std::map<std::string, int>> EffectsByCommandAcross(
    const std::vector<std::string>& addresses);
absl::StatusOr<ledger::v1::GetTotalResponse> LedgerTotalAcross(
    const std::vector<std::string>& addresses);

// A run judged from the ground truth: what became of each command the producer was told
// was accepted, against the effects the services hold. The demo and the fault tests
// judge this way; each decides which counts its verdict allows.
struct Judgement {
  int64_t applied = 0;       // ACKED with exactly one effect
  int64_t rejected = 0;      // business rejections (stored and replayed)
  int64_t conflicts = 0;     // a key reused with another payload or command
  int64_t dead_letters = 0;
  int64_t other_final = 0;   // expired, dropped
  int64_t not_final = 0;     // still waiting
  int64_t lost = 0;          // no record, or ACKED without exactly one effect
  int64_t duplicate_effects = 0;  // command ids with more than one effect, in any service
  int64_t effects = 0;       // all effects, in every service
};

// `accepted`: the command ids the producer was told were stored; `records`: the agent's
// records (AllRecords); `effects`: EffectsByCommand of every service the commands went
// to (an ACKED command must have exactly one effect across them); `other_effects`: those
// of services outside the agent's path, counted for duplicates and the total only.
Judgement Judge(const std::set<std::string>& accepted,
                const std::map<std::string, v1::OutboxRecord>& records,
                const std::vector<std::map<std::string, int>>& effects,
                const std::vector<std::map<std::string, int>>& other_effects = {});

}  // namespace eonce::testing

#endif  // EONCE_TESTS_UTIL_GROUND_TRUTH_H_
