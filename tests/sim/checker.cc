// The checks, once the world has settled: against the business's effect ledger (the
// ground truth), every accepted command applied exactly once, nothing applied that was
// not accepted, money conserved, the agent's records final and in agreement, and the
// producer's projection equal to what the acks say.
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "eonce/ledger/v1/ledger.pb.h"
#include "tests/sim/world.h"

namespace eonce::sim::internal {

void World::Check() {
  // Ground truth: the business's effect ledger.
  std::map<std::string, std::vector<v1::Effect>> effects;
  auto page = inbox_->ListEffects(0, 10'000);
  if (!page.ok()) {
    Violation("cannot read the effect ledger");
    return;
  }
  for (const auto& e : page->effects()) effects[e.command_id()].push_back(e);
  for (const auto& [id, list] : effects) {
    if (list.size() > 1) Violation(absl::StrCat("duplicate effect: ", id, " applied ", list.size(), " times"));
  }

  int64_t acked_transfers = 0, acked_amount = 0;
  for (const std::string& id : accepted_) {
    auto found = outbox_store_->Get(id);
    if (!found.ok() || !found->has_value()) {
      Violation(absl::StrCat("loss: accepted command ", id, " is gone from the outbox"));
      continue;
    }
    const OutboxRecord& r = **found;
    if (!IsFinal(r.state()) && r.last_error().reason().empty() && r.state() != v1::QUEUED) {
      Violation(absl::StrCat("loss: ", id, " is ", v1::OutboxState_Name(r.state()), " with no reason"));
    }
    int applied = static_cast<int>(effects[id].size());
    if (r.state() == v1::ACKED) {
      if (r.result().code() != 0 || applied != 1) {
        Violation(absl::StrCat("acked ", id, " has ", applied, " effects"));
        continue;
      }
      if (r.command().target_method() == kTransfer) {
        ledger::v1::TransferResponse response;
        response.ParseFromString(r.result().response());
        if (response.effect_seq() != effects[id][0].seq()) {
          Violation(absl::StrCat("acked ", id, " answer names effect ", response.effect_seq(),
                                 " but the ledger holds ", effects[id][0].seq()));
        }
        ledger::v1::TransferRequest request;
        request.ParseFromString(r.command().request());
        ++acked_transfers;
        acked_amount += request.amount();
      }
    }
    if (r.state() == v1::REJECTED && applied != 0) {
      Violation(absl::StrCat("rejected ", id, " has ", applied, " effects"));
    }
  }
  for (const auto& [id, list] : effects) {
    if (!id.empty() && accepted_.count(id) == 0) {
      Violation(absl::StrCat("loss: ", id, " has an effect but the outbox never accepted it"));
    }
  }
  // One intent, one record: a lost Enqueue answer must not become a second command.
  int64_t records = 0;
  for (int64_t n : outbox_store_->CountsByState()) records += n;
  if (records > static_cast<int64_t>(accepted_intents_.size()) + abandoned_intents_) {
    Violation(absl::StrCat("the outbox holds ", records, " records for ",
                           accepted_intents_.size(),
                           " accepted intents: a retry was stored as a second command"));
  }
  auto total = ledger_->GetTotal();
  if (!total.ok() || total->total_balance() != total->total_minted()) {
    Violation("ledger total not conserved");
  }
  RefreshProjection();
  if (projection_.transfers() != acked_transfers || projection_.amount_moved() != acked_amount) {
    Violation(absl::StrCat("projection holds ", projection_.transfers(), " transfers and ",
                           projection_.amount_moved(), " moved; the acks say ", acked_transfers,
                           " and ", acked_amount));
  }
}

}  // namespace eonce::sim::internal
