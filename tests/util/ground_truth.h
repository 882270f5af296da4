// What really happened, read from the running components over gRPC: every record the
// agent holds, every effect a service's effect ledger holds, and the ledger's money. The
// demo, the fault tests and the benchmarks judge a run with these, the same way.
#ifndef EONCE_TESTS_UTIL_GROUND_TRUTH_H_
#define EONCE_TESTS_UTIL_GROUND_TRUTH_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "eonce/ledger/v1/ledger.pb.h"
#include "eonce/v1/agent.grpc.pb.h"

namespace eonce::testing {

// Every record the agent holds, by command id, page by page; the first page that fails
// fails it all (a partial listing would hide records).
absl::StatusOr<std::map<std::string, v1::OutboxRecord>> AllRecords(v1::Agent::Stub& agent);

// How many effects each command id has in the effect ledger of the service at `address`
// (plaintext, loopback), page by page.
absl::StatusOr<std::map<std::string, int>> EffectsByCommand(const std::string& address);

// The ledger's total balance and the money it minted (equal when money is conserved).
absl::StatusOr<ledger::v1::GetTotalResponse> LedgerTotal(const std::string& address);

}  // namespace eonce::testing

#endif  // EONCE_TESTS_UTIL_GROUND_TRUTH_H_
