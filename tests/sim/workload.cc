// The workload: the producer's intents (opens and transfers, some submitted twice, some
// whose Enqueue answer is lost, some without an id), the agent's ticks, and the producer's
// projection of the outcomes.
#include <string>

#include "absl/strings/str_cat.h"
#include "common/command/command.h"
#include "eonce/ledger/v1/ledger.pb.h"
#include "outbox_agent/client/client.h"
#include "tests/sim/world.h"

namespace eonce::sim::internal {

v1::Command World::MakeCommand(int index) {
  v1::Command c;
  // Some producers give no command id: the client library creates one before the first
  // attempt (World::Enqueue).
  if (index % 3 != 2) c.set_command_id(absl::StrCat("c", index));
  if (index < config_.accounts) {
    ledger::v1::OpenAccountRequest open;
    open.set_id(absl::StrCat("a", index));
    open.set_initial_balance(100);
    c.set_target_method(kOpen);
    c.set_request(open.SerializeAsString());
    c.mutable_entity()->set_type("account");
    c.mutable_entity()->set_id(open.id());
    return c;
  }
  ledger::v1::TransferRequest t;
  int from = static_cast<int>(workload_random_.Uniform(config_.accounts));
  int to = (from + 1 + static_cast<int>(workload_random_.Uniform(config_.accounts - 1))) % config_.accounts;
  t.set_from(absl::StrCat("a", from));
  t.set_to(absl::StrCat("a", to));
  t.set_amount(1 + static_cast<int64_t>(workload_random_.Uniform(60)));
  // Every fourth transfer carries a memo the ledger does not read (a field it does not
  // know), long enough that the agent keeps the payload apart from its record
  // (outbox_layout.h).
  std::string request = t.SerializeAsString();
  if (index % 4 == 1) {
    // Field 15, length-delimited (tag 0x7a), 600 bytes (varint 0xd8 0x04).
    request += std::string("\x7a\xd8\x04", 3) + std::string(600, 'm');
  }
  c.set_target_method(kTransfer);
  c.set_request(request);
  c.mutable_entity()->set_type("account");
  c.mutable_entity()->set_id(t.from());
  return c;
}

void World::Enqueue(int index, int tries_left) {
  v1::Command& command = commands_[index];
  // What the client library does before its first attempt (outbox_agent/client/client.h); the
  // negative control leaves the id to the agent, which creates one per attempt.
  if (!options_.late_ids) AssignCommandId(&command, workload_random_);
  if (tries_left <= 0) {
    abandoned_.insert(command.command_id());
    ++abandoned_intents_;
    return;
  }
  if (!nodes_[kAgent].up) {
    loop_.After(100, [this, index, tries_left] { Enqueue(index, tries_left - 1); });
    return;
  }
  auto r = outbox_->Enqueue(command);
  bool answer_lost = r.ok() && workload_random_.Chance(config_.lose_enqueue_answer);
  Trace(absl::StrCat("enqueue ", index, " ",
                     r.ok() ? r->record().command().command_id() : "", " ",
                     r.ok() ? (r->created() ? "created" : "existing") : r.status().ToString(),
                     answer_lost ? " answer lost" : ""));
  if (r.ok() && !answer_lost) {
    accepted_.insert(r->record().command().command_id());
    accepted_intents_.insert(index);
    return;
  }
  // The producer did not get a yes: it tries again, with the same command id.
  loop_.After(100, [this, index, tries_left] { Enqueue(index, tries_left - 1); });
}

void World::RefreshProjection() {
  // After a restart the feed may have missed acks: read what is true from the store.
  if (outbox_store_ == nullptr) return;
  std::string after;
  for (int page = 0; page < 1000; ++page) {
    auto acked = outbox_store_->List(v1::ACKED, after, 1000);
    if (!acked.ok() || acked->empty()) break;
    for (const auto& record : *acked) projection_.Apply(record);
    after = acked->back().command().command_id();
    if (acked->size() < 1000) break;
  }
}

void World::DrainFeed() {
  if (subscription_ == nullptr) return;
  v1::WatchEvent event;
  while (subscription_->Next(&event, 0)) {
    Trace(absl::StrCat("state ", event.command_id(), " ", v1::OutboxState_Name(event.state())));
    if (event.state() != v1::ACKED) continue;
    auto record = outbox_store_->Get(event.command_id());
    if (record.ok() && record->has_value()) projection_.Apply(**record);
  }
  if (subscription_->cut_off()) RefreshProjection();
}

void World::AgentTick() {
  if (nodes_[kAgent].up) {
    replayer_->Pump();
    DrainFeed();
  }
  loop_.After(kTickMs, [this] { AgentTick(); });
}

bool World::Settled() {
  if (!nodes_[kAgent].up || !nodes_[kSidecar].up || !nodes_[kBusiness].up) return false;
  if (options_.shards) {
    if (!nodes_[kSidecar2].up || !nodes_[kBusiness2].up) return false;
    if (!Leased(0) || !Leased(1)) return false;
    for (const Move& move : moves_) {
      if (!move.done) return false;  // a move still frozen would hold its slots' commands
    }
    absl::StatusOr<SlotMap> map = coord_->Read();
    if (map.ok() && map->proto().migrations_size() > 0) return false;
    // Each business holds the slots its sidecar owns in the store's map (HoldSlotData), so
    // that what it counts and lists is its own.
    for (int shard = 0; shard < 2; ++shard) {
      if (!map.ok() || sidecars_[shard].held_declared < map->epoch()) return false;
    }
    // Credits still in a business's outbox are money on its way.
    if (inbox(0).follow_ups_pending() > 0 || inbox(1).follow_ups_pending() > 0) return false;
  }
  if (accepted_.size() + abandoned_.size() < commands_.size()) return false;
  // A parked command (unknown outcome, a legacy business) is a clear state that waits for
  // an operator, and so are the later commands of its entity, which wait behind it.
  std::set<std::string> blocked_entities;
  std::vector<OutboxRecord> waiting;
  std::set<std::string> sent = accepted_;
  sent.insert(relayed_.begin(), relayed_.end());
  for (const std::string& id : sent) {
    auto record = outbox_store_->Get(id);
    if (!record.ok() || !record->has_value()) return true;  // lost: Check reports it
    const OutboxRecord& r = **record;
    if (r.state() == v1::UNKNOWN && r.last_error().reason() == "OUTCOME_UNKNOWN") {
      blocked_entities.insert(r.command().entity().id());
    } else if (!IsFinal(r.state())) {
      waiting.push_back(r);
    }
  }
  for (const OutboxRecord& r : waiting) {
    if (blocked_entities.count(r.command().entity().id()) == 0) return false;
  }
  return true;
}

}  // namespace eonce::sim::internal
