#include "tests/util/ground_truth.h"

#include <chrono>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/command/command.h"
#include "eonce/ledger/v1/ledger.grpc.pb.h"
#include "eonce/v1/outcome.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "outbox_agent/store/states.h"

namespace eonce::testing {
namespace {

constexpr int kMaxPages = 10'000;
constexpr int kRecordsPerPage = 1'000;
constexpr int kEffectsPerPage = 10'000;

std::unique_ptr<grpc::ClientContext> Context() {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  return context;
}

// A business port admits eonce components: the ground truth is read as one.
std::unique_ptr<grpc::ClientContext> CheckerContext() {
  auto context = Context();
  context->AddMetadata(kComponentHeader, "checker");
  return context;
}

absl::Status Failed(const grpc::Status& status, const char* what) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat(what, ": ", status.error_message()));
}

}  // namespace

absl::StatusOr<std::map<std::string, v1::OutboxRecord>> AllRecords(v1::Agent::Stub& agent) {
  std::map<std::string, v1::OutboxRecord> all;
  std::string after;
  for (int page = 0; page < kMaxPages; ++page) {
    v1::ListRequest request;
    request.set_limit(kRecordsPerPage);
    request.set_after_command_id(after);
    v1::ListResponse response;
    auto context = Context();
    grpc::Status listed = agent.List(context.get(), request, &response);
    if (!listed.ok()) return Failed(listed, "list the agent's records");
    for (const auto& r : response.records()) all[r.command().command_id()] = r;
    after = response.next_after_command_id();
    if (after.empty()) return all;
  }
  return absl::ResourceExhaustedError("the agent's records run past the page limit");
}

absl::StatusOr<std::map<std::string, int>> EffectsByCommand(const std::string& address) {
  auto stub = v1::Effects::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  std::map<std::string, int> counts;
  uint64_t after = 0;
  for (int page = 0; page < kMaxPages; ++page) {
    v1::ListEffectsRequest request;
    request.set_after_seq(after);
    request.set_limit(kEffectsPerPage);
    v1::ListEffectsResponse response;
    auto context = CheckerContext();
    grpc::Status listed = stub->ListEffects(context.get(), request, &response);
    if (!listed.ok()) return Failed(listed, "list the effects");
    for (const auto& e : response.effects()) counts[e.command_id()]++;
    if (response.effects_size() < kEffectsPerPage) return counts;
    after = response.last_seq();
  }
  return absl::ResourceExhaustedError("the effect ledger runs past the page limit");
}

absl::StatusOr<ledger::v1::GetTotalResponse> LedgerTotal(const std::string& address) {
  auto stub = ledger::v1::Ledger::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  ledger::v1::GetTotalResponse total;
  auto context = CheckerContext();
  grpc::Status got = stub->GetTotal(context.get(), ledger::v1::GetTotalRequest(), &total);
  if (!got.ok()) return Failed(got, "read the ledger's total");
  return total;
}

absl::StatusOr<std::map<std::string, int>> EffectsByCommandAcross(
    const std::vector<std::string>& addresses) {
  std::map<std::string, int> merged;
  for (const std::string& address : addresses) {
    absl::StatusOr<std::map<std::string, int>> effects = EffectsByCommand(address);
    if (!effects.ok()) return effects.status();
    for (const auto& [id, n] : *effects) merged[id] += n;
  }
  return merged;
}

absl::StatusOr<ledger::v1::GetTotalResponse> LedgerTotalAcross(
    const std::vector<std::string>& addresses) {
  ledger::v1::GetTotalResponse sum;
  for (const std::string& address : addresses) {
    absl::StatusOr<ledger::v1::GetTotalResponse> total = LedgerTotal(address);
    if (!total.ok()) return total.status();
    sum.set_total_balance(sum.total_balance() + total->total_balance());
    sum.set_total_minted(sum.total_minted() + total->total_minted());
    sum.set_accounts(sum.accounts() + total->accounts());
    sum.set_credits_sent(sum.credits_sent() + total->credits_sent());
    sum.set_credits_received(sum.credits_received() + total->credits_received());
    sum.set_unclaimed(sum.unclaimed() + total->unclaimed());
  }
  return sum;
}

Judgement Judge(const std::set<std::string>& accepted,
                const std::map<std::string, v1::OutboxRecord>& records,
                const std::vector<std::map<std::string, int>>& effects,
                const std::vector<std::map<std::string, int>>& other_effects) {
  Judgement j;
  for (const auto* ledgers : {&effects, &other_effects}) {
    for (const auto& ledger : *ledgers) {
      for (const auto& [id, n] : ledger) {
        j.effects += n;
        if (n > 1) j.duplicate_effects++;
      }
    }
  }
  auto effects_of = [&](const std::string& id) {
    int n = 0;
    for (const auto& ledger : effects) {
      if (auto it = ledger.find(id); it != ledger.end()) n += it->second;
    }
    return n;
  };
  for (const std::string& id : accepted) {
    auto it = records.find(id);
    if (it == records.end()) {
      j.lost++;
      continue;
    }
    switch (it->second.state()) {
      case v1::ACKED:
        // Acked must mean applied exactly once, by the service the command went to.
        (effects_of(id) == 1 ? j.applied : j.lost)++;
        break;
      case v1::REJECTED:
        j.rejected++;
        break;
      case v1::CONFLICT:
        j.conflicts++;
        break;
      case v1::DEAD_LETTERED:
        j.dead_letters++;
        break;
      default:
        (IsFinal(it->second.state()) ? j.other_final : j.not_final)++;
    }
  }
  return j;
}

}  // namespace eonce::testing
