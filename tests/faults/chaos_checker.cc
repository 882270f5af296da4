#include "tests/faults/chaos_checker.h"

#include <chrono>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/command/command.h"
#include "eonce/ledger/v1/ledger.grpc.pb.h"
#include "eonce/v1/outcome.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

namespace eonce::testing {
namespace {

constexpr char kOpenAccount[] = "/eonce.ledger.v1.Ledger/OpenAccount";
constexpr char kCredit[] = "/eonce.ledger.v1.Ledger/Credit";
constexpr int kMaxPages = 10'000;
constexpr int kEffectsPerPage = 10'000;

// What makes two effect rows the same effect: a row a move copied is identical to its
// original; a second application differs at least in its revision or its time.
std::string RowIdentity(const v1::Effect& e) {
  return absl::StrCat(e.command_id(), "|", e.entity(), "|", e.method(), "|", e.amount(), "|",
                      e.revision(), "|", e.applied_at_ms());
}

std::unique_ptr<grpc::ClientContext> CheckerContext() {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  context->AddMetadata(kComponentHeader, "checker");  // a business port admits components
  return context;
}

absl::Status Failed(const grpc::Status& status, const std::string& what) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat(what, ": ", status.error_message()));
}

}  // namespace

bool TenantVerdict::ok() const {
  return judged.lost == 0 && judged.duplicate_effects == 0 && judged.not_final == 0 &&
         judged.conflicts == 0 && judged.dead_letters == 0 && judged.other_final == 0 &&
         judged.applied + judged.rejected == acked && conserved() && misplaced == 0;
}

bool ChaosVerdict::ok() const {
  for (const TenantVerdict& t : tenants) {
    if (!t.ok()) return false;
  }
  return total.credits_sent() == total.credits_received() && total.unclaimed() == 0 &&
         total.total_balance() == total.total_minted();
}

std::string ChaosVerdict::Table() const {
  std::string out = absl::StrFormat("%-8s %6s %7s %8s %5s %10s %7s %7s %8s %9s %9s %9s\n",
                                    "tenant", "acked", "applied", "rejected", "lost",
                                    "duplicates", "waiting", "carried", "credits", "minted",
                                    "balance", "misplaced");
  for (const TenantVerdict& t : tenants) {
    absl::StrAppendFormat(
        &out, "%-8s %6d %7d %8d %5d %10d %7d %7d %8d %9d %9d %9d%s\n", t.tenant, t.acked,
        t.judged.applied, t.judged.rejected, t.judged.lost, t.judged.duplicate_effects,
        t.judged.not_final + t.judged.other_final + t.judged.conflicts + t.judged.dead_letters,
        t.carried, t.credits, t.minted, t.balance, t.misplaced, t.ok() ? "" : "  <- WRONG");
  }
  absl::StrAppendFormat(&out,
                        "all shards: balance=%d minted=%d credits_sent=%d credits_received=%d "
                        "unclaimed=%d%s\n",
                        total.total_balance(), total.total_minted(), total.credits_sent(),
                        total.credits_received(), total.unclaimed(), ok() ? "" : "  <- WRONG");
  return out;
}

ChaosVerdict CheckChaos(const std::vector<TenantLoad>& loads,
                        const std::vector<ShardReading>& shards, const SlotMap& final_map) {
  ChaosVerdict verdict;
  for (const ShardReading& shard : shards) {
    verdict.total.set_total_balance(verdict.total.total_balance() + shard.total.total_balance());
    verdict.total.set_total_minted(verdict.total.total_minted() + shard.total.total_minted());
    verdict.total.set_credits_sent(verdict.total.credits_sent() + shard.total.credits_sent());
    verdict.total.set_credits_received(verdict.total.credits_received() +
                                       shard.total.credits_received());
    verdict.total.set_unclaimed(verdict.total.unclaimed() + shard.total.unclaimed());
  }
  for (const TenantLoad& load : loads) {
    TenantVerdict t;
    t.tenant = load.tenant;
    t.acked = static_cast<int64_t>(load.acked.size());
    // Each command's distinct effect rows, over every shard, and how many shards hold each.
    std::map<std::string, std::map<std::string, int>> rows;  // command -> row -> shards
    std::map<std::string, const v1::Effect*> one_row;
    for (const ShardReading& shard : shards) {
      for (const v1::Effect& e : shard.effects) {
        if (e.tenant() != load.tenant || e.command_id().empty()) continue;
        const std::string row = RowIdentity(e);
        rows[e.command_id()][row]++;
        one_row.emplace(row, &e);
      }
    }
    std::map<std::string, int> effects;  // command -> distinct effects
    for (const auto& [id, of_command] : rows) {
      effects[id] = static_cast<int>(of_command.size());
      for (const auto& [row, copies] : of_command) {
        if (copies > 1) t.carried++;
        const v1::Effect& e = *one_row.at(row);
        if (e.method() == kOpenAccount) t.minted += e.amount();
        if (e.method() == kCredit) t.credits++;
      }
    }
    t.judged = Judge(load.acked, load.records, {effects});
    for (const std::string& account : load.accounts) {
      const std::string& owner = final_map.OwnerOf(SlotOf(load.tenant, "account", account));
      int at_owner = 0, elsewhere = 0;
      for (const ShardReading& shard : shards) {
        auto it = shard.accounts.find(account);
        if (it == shard.accounts.end()) continue;
        if (it->second.tenant() != load.tenant) {
          ++elsewhere;  // another tenant's row under this id: not this tenant's account
          continue;
        }
        if (shard.shard == owner) {
          ++at_owner;
          t.balance += it->second.balance();
        } else {
          ++elsewhere;
        }
      }
      if (at_owner != 1 || elsewhere != 0) ++t.misplaced;
    }
    verdict.tenants.push_back(std::move(t));
  }
  return verdict;
}

int EffectsOfSlotsBetween(const std::vector<ShardReading>& shards, const SlotMap& map,
                          const std::string& shard, int64_t from_ms, int64_t to_ms) {
  std::set<std::pair<std::string, int64_t>> applied;  // a copied row: same command, same time
  for (const ShardReading& reading : shards) {
    for (const v1::Effect& e : reading.effects) {
      if (e.applied_at_ms() < from_ms || e.applied_at_ms() >= to_ms) continue;
      const size_t slash = e.entity().find('/');
      if (slash == std::string::npos) continue;
      const uint32_t slot =
          SlotOf(e.tenant(), e.entity().substr(0, slash), e.entity().substr(slash + 1));
      if (map.OwnerOf(slot) == shard) applied.emplace(e.command_id(), e.applied_at_ms());
    }
  }
  return static_cast<int>(applied.size());
}

absl::StatusOr<ShardReading> ReadShard(const std::string& shard,
                                       const std::string& ledger_address,
                                       const std::vector<std::string>& accounts) {
  ShardReading reading;
  reading.shard = shard;
  auto channel = grpc::CreateChannel(ledger_address, grpc::InsecureChannelCredentials());
  auto effects = v1::Effects::NewStub(channel);
  uint64_t after = 0;
  for (int page = 0;; ++page) {
    if (page == kMaxPages) {
      return absl::ResourceExhaustedError(absl::StrCat(shard, ": effects past the page limit"));
    }
    v1::ListEffectsRequest request;
    request.set_after_seq(after);
    request.set_limit(kEffectsPerPage);
    v1::ListEffectsResponse response;
    auto context = CheckerContext();
    grpc::Status listed = effects->ListEffects(context.get(), request, &response);
    if (!listed.ok()) return Failed(listed, absl::StrCat(shard, ": list the effects"));
    for (v1::Effect& e : *response.mutable_effects()) reading.effects.push_back(std::move(e));
    if (response.effects_size() < kEffectsPerPage) break;
    after = response.last_seq();
  }
  auto ledger = ledger::v1::Ledger::NewStub(channel);
  for (const std::string& id : accounts) {
    ledger::v1::GetAccountRequest request;
    request.set_id(id);
    ledger::v1::Account account;
    auto context = CheckerContext();  // no tenant: the checker reads every tenant's account
    grpc::Status got = ledger->GetAccount(context.get(), request, &account);
    if (got.error_code() == grpc::StatusCode::NOT_FOUND) continue;
    if (!got.ok()) return Failed(got, absl::StrCat(shard, ": read account ", id));
    reading.accounts[id] = account;
  }
  auto context = CheckerContext();
  grpc::Status total = ledger->GetTotal(context.get(), ledger::v1::GetTotalRequest(),
                                        &reading.total);
  if (!total.ok()) return Failed(total, absl::StrCat(shard, ": read the totals"));
  return reading;
}

}  // namespace eonce::testing
