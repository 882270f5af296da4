// The chaos test's verdict, from the ground truth of every shard: each business's effect
// ledger (every row, not only counts), its accounts and its totals, against what each
// tenant's producer was told was accepted and what its agent recorded.
//
// Per tenant it counts what became of each accepted command (Judge), the commands with
// more than one effect anywhere (duplicates), and whether the tenant's money is conserved:
// the balances of its accounts, each read at its slot's owner, against the money its
// OpenAccount effects minted. Across the shards it checks that every account lives at its
// owner only and that every credit sent between shards was received.
//
// A slot move may copy effect rows to the new owner: the same row (same command, entity,
// method, amount, revision and time) on two shards is one effect carried along, counted
// apart as `carried`; two different rows for one command are two effects, a duplicate.
#ifndef EONCE_TESTS_FAULTS_CHAOS_CHECKER_H_
#define EONCE_TESTS_FAULTS_CHAOS_CHECKER_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/coord/slots.h"
#include "eonce/ledger/v1/ledger.pb.h"
#include "eonce/v1/agent.pb.h"
#include "eonce/v1/outcome.pb.h"
#include "tests/util/ground_truth.h"

namespace eonce::testing {

// What one tenant sent, and its agent's records at the end.
struct TenantLoad {
  std::string tenant;
  std::set<std::string> acked;                      // the producer was told: stored
  std::map<std::string, v1::OutboxRecord> records;  // AllRecords of the tenant's agent
  std::vector<std::string> accounts;                // the account ids it opened
};

// What one shard's business holds at the end.
struct ShardReading {
  std::string shard;  // its shard id ("s0")
  std::vector<v1::Effect> effects;
  std::map<std::string, ledger::v1::Account> accounts;  // by account id, those it holds
  ledger::v1::GetTotalResponse total;
};

struct TenantVerdict {
  std::string tenant;
  int64_t acked = 0;
  Judgement judged;         // lost, duplicate_effects, applied, rejected, ...
  int64_t carried = 0;      // effect rows present, identical, on more than one shard
  int64_t credits = 0;      // cross-shard credits (and refunds) with an effect
  int64_t minted = 0;       // OpenAccount effects' amounts
  int64_t balance = 0;      // the tenant's accounts, each read at its owner
  int misplaced = 0;        // accounts not held by exactly their owner
  bool conserved() const { return minted == balance; }
  bool ok() const;
};

struct ChaosVerdict {
  std::vector<TenantVerdict> tenants;
  ledger::v1::GetTotalResponse total;  // summed over the shards
  bool ok() const;
  // One line a tenant, then the cross-shard figures.
  std::string Table() const;
};

// Judges the readings against the loads; `final_map` says which shard owns each account.
ChaosVerdict CheckChaos(const std::vector<TenantLoad>& loads,
                        const std::vector<ShardReading>& shards, const SlotMap& final_map);

// How many effects (rows a move copied counted once), on any shard, are of slots `shard`
// owns in `map` and were applied in [from_ms, to_ms): what went through that shard then,
// or through another process that wrongly took its slots.
int EffectsOfSlotsBetween(const std::vector<ShardReading>& shards, const SlotMap& map,
                          const std::string& shard, int64_t from_ms, int64_t to_ms);

// Reads shard `shard`'s business at `ledger_address` (plaintext loopback, as the eonce
// component "checker"): every effect row, every one of `accounts` it holds, its totals.
absl::StatusOr<ShardReading> ReadShard(const std::string& shard,
                                       const std::string& ledger_address,
                                       const std::vector<std::string>& accounts);

}  // namespace eonce::testing

#endif  // EONCE_TESTS_FAULTS_CHAOS_CHECKER_H_
