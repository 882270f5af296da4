// The checks, once the world has settled: against the business's effect ledger (the
// ground truth), every accepted command applied exactly once, nothing applied that was
// not accepted, money conserved, the agent's records final and in agreement, and the
// producer's projection equal to what the acks say.
#include <map>
#include <set>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "eonce/ledger/v1/ledger.pb.h"
#include "tests/sim/world.h"

namespace eonce::sim::internal {

void World::CheckAnswersAfterMoves() {
  std::set<std::string> finished = accepted_;
  finished.insert(relayed_.begin(), relayed_.end());
  for (const std::string& id : finished) {
    auto found = outbox_store_->Get(id);
    if (!found.ok() || !found->has_value()) continue;  // Check reports the loss
    const OutboxRecord& r = **found;
    if (r.state() != v1::ACKED && r.state() != v1::REJECTED) continue;
    const int shard = OwnerShard(r.command());
    Caller caller;
    caller.tenant = kTenant;
    caller.credential_epoch = epoch_;
    // Shared with the callback, which may outlive this call if no answer comes in time.
    struct Answer {
      bool answered = false;
      absl::StatusOr<v1::SubmitResponse> got = absl::UnknownError("no answer");
    };
    std::shared_ptr<Answer> answer;
    // A retryable refusal (the first attempt still in flight, a late forward not yet
    // landed, a sidecar between leases) is retried, as the agent would, a bounded number
    // of times.
    for (int attempt = 0; attempt < 50; ++attempt) {
      answer = std::make_shared<Answer>();
      SubmitTo(shard, caller, r.command(), [answer](absl::StatusOr<v1::SubmitResponse> got) {
        answer->answered = true;
        answer->got = std::move(got);
      });
      for (int step = 0; step < 10'000 && !answer->answered && loop_.Step(); ++step) {
      }
      if (!answer->answered || answer->got.ok() ||
          answer->got.status().code() != absl::StatusCode::kUnavailable) {
        break;
      }
      const int64_t until = clock_.NowMs() + 200;
      while (clock_.NowMs() < until && loop_.Step()) {
      }
    }
    const bool answered = answer->answered;
    const absl::StatusOr<v1::SubmitResponse>& got = answer->got;
    if (!answered || !got.ok()) {
      Violation(absl::StrCat("after the moves, ", id, " sent again to s", shard, " got ",
                             answered ? got.status().ToString() : "no answer"));
      continue;
    }
    if (got->result().SerializeAsString() != r.result().SerializeAsString()) {
      Violation(absl::StrCat("after the moves, ", id, " sent again to s", shard,
                             " got another answer than the first"));
    }
    // A business without an inbox keeps no answer: only a record that moved with its slot
    // can give it (and the sidecar syncs those for such a business).
    if (config_.legacy && got->disposition() != v1::REPLAYED) {
      Violation(absl::StrCat("after the moves, ", id, " was not answered from a record at s",
                             shard, ", the owner of its slot"));
    }
  }
}

void World::Check() {
  // Sent again before the effects are read, so a second effect shows below.
  if (options_.shards) CheckAnswersAfterMoves();
  // Ground truth: the businesses' effect ledgers (an effect moves with its slot, and each
  // business lists only the slots it holds).
  std::map<std::string, std::vector<v1::Effect>> effects;
  for (int shard = 0; shard < shards(); ++shard) {
    auto page = inbox(shard).ListEffects(0, 10'000);
    if (!page.ok()) {
      Violation("cannot read the effect ledger");
      return;
    }
    for (const auto& e : page->effects()) effects[e.command_id()].push_back(e);
  }
  for (const auto& [id, list] : effects) {
    if (list.size() > 1) Violation(absl::StrCat("duplicate effect: ", id, " applied ", list.size(), " times"));
  }

  int64_t acked_transfers = 0, acked_amount = 0;
  // The producer's commands, and the credits the relay took from the businesses.
  std::set<std::string> sent = accepted_;
  sent.insert(relayed_.begin(), relayed_.end());
  for (const std::string& id : sent) {
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
        // Sequence numbers are each store's own, and a move renumbers the effects it
        // carries into the new owner's sequence: in a sharded world the effect is matched
        // by its command id alone (exactly one, above).
        if (!options_.shards && response.effect_seq() != effects[id][0].seq()) {
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
    if (!id.empty() && sent.count(id) == 0) {
      Violation(absl::StrCat("loss: ", id, " has an effect but the outbox never accepted it"));
    }
  }
  // One intent, one record: a lost Enqueue answer must not become a second command.
  int64_t records = 0;
  for (int64_t n : outbox_store_->CountsByState()) records += n;
  if (records > static_cast<int64_t>(accepted_intents_.size() + relayed_.size()) +
                    abandoned_intents_) {
    Violation(absl::StrCat("the outbox holds ", records, " records for ",
                           accepted_intents_.size(),
                           " accepted intents: a retry was stored as a second command"));
  }
  if (options_.shards) {
    CheckBooks();
  } else {
    auto total = ledger().GetTotal();
    if (!total.ok() || total->total_balance() != total->total_minted()) {
      Violation("ledger total not conserved");
    }
  }
  RefreshProjection();
  if (projection_.transfers() != acked_transfers || projection_.amount_moved() != acked_amount) {
    Violation(absl::StrCat("projection holds ", projection_.transfers(), " transfers and ",
                           projection_.amount_moved(), " moved; the acks say ", acked_transfers,
                           " and ", acked_amount));
  }
}

void World::ForwardIssued(const std::string& tenant, const std::string& command_id, int node) {
  ForwardLog& log = forward_log_[{tenant, command_id}];
  const int incarnation = nodes_[node].incarnation;
  const bool forgotten_by_a_restart =
      !config_.legacy && (log.incarnation != incarnation || log.node != node);
  if (log.forwards > 0 && !log.proven_not_applied) {
    if (forgotten_by_a_restart) {
      Trace("forwarded again after a sidecar restart " + command_id);
    } else {
      Violation(absl::StrCat("forwarded again without proof that it was not applied: ",
                             command_id, " (forward ", log.forwards + 1, ")"));
    }
  }
  log.forwards++;
  log.proven_not_applied = false;
  log.incarnation = incarnation;
  log.node = node;
}

void World::ProvenNotApplied(const std::string& tenant, const std::string& command_id) {
  forward_log_[{tenant, command_id}].proven_not_applied = true;
}

}  // namespace eonce::sim::internal
