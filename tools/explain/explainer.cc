#include "tools/explain/explainer.h"

#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/base/status.h"
#include "common/command/trace_context.h"
#include "services/inbox/inbox.h"
#include "tools/explain/verdict.h"

namespace eonce::explain {
namespace {

absl::Status CheckQuery(const std::string& query) {
  if (query.empty()) return Error(absl::StatusCode::kInvalidArgument, "MALFORMED_QUERY",
                                  "give a command id or an idempotency key");
  if (query.size() > kMaxQueryBytes) {
    return Error(absl::StatusCode::kInvalidArgument, "MALFORMED_QUERY",
                 absl::StrCat("longer than any command id or key (", kMaxQueryBytes, " bytes)"));
  }
  for (unsigned char c : query) {
    if (c < 0x20 || c >= 0x7f) {
      return Error(absl::StatusCode::kInvalidArgument, "MALFORMED_QUERY",
                   "a command id or key holds printable ASCII only");
    }
  }
  return absl::OkStatus();
}

std::string Unread(const std::string& what, const std::string& who, const absl::Status& s) {
  return absl::StrCat(what, " of ", who, ": ", absl::StatusCodeToString(s.code()), " ",
                      s.message());
}

v1::JourneyEvent* Add(v1::Journey* j, int64_t at_ms, const std::string& source,
                      const std::string& kind, const std::string& command_id,
                      const std::string& detail) {
  v1::JourneyEvent* e = j->add_events();
  e->set_at_ms(at_ms);
  e->set_source(source);
  e->set_kind(kind);
  e->set_command_id(command_id);
  e->set_detail(detail);
  return e;
}

// What a sidecar's audit decision means, for the timeline (the decision stays its kind).
std::string Meaning(const std::string& decision) {
  static const auto* meanings = new std::map<std::string, std::string>{
      {"committed", "first seen, forwarded, the business's answer stored"},
      {"rejected", "first seen, forwarded, the business rejected it (stored)"},
      {"duplicate_returned", "a duplicate, answered from the stored response"},
      {"conflict", "the key is taken by another payload or command"},
      {"in_progress", "a duplicate while the first was in flight"},
      {"refused", "the business turned it away; key freed"},
      {"parked_unknown", "outcome unknown and the business cannot tell: parked"},
      {"recovered", "an unknown outcome settled by asking the business"},
      {"resolved_applied", "an operator resolved it as applied"},
      {"resolved_not_applied", "an operator resolved it as not applied; key freed"},
      {"reconciled", "an agent asked what became of it"},
  };
  auto it = meanings->find(decision);
  return it == meanings->end() ? "" : it->second + "; ";
}

// Within one millisecond, events go in the order they can happen: enqueued, the sidecar's
// decisions and the effect they led to, then the agent's reading of the answer.
int Rank(const v1::JourneyEvent& e) {
  if (e.kind() == "enqueued") return 0;
  if (e.kind() == "applied") return 1;
  if (e.source().rfind("sidecar", 0) == 0) return 2;
  return 3;
}

std::string CodeName(int code) {
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
}

void AddAgentEvents(const v1::OutboxRecord& r, const std::string& source, v1::Journey* j) {
  const v1::Command& c = r.command();
  const std::string trace_id = TraceIdOf(c.trace());
  Add(j, r.created_at_ms(), source, "enqueued", c.command_id(),
      absl::StrCat("key ", c.idempotency_key(), ", entity ", c.entity().type(), "/",
                   c.entity().id(), ", ", c.target_method()))
      ->set_trace_id(trace_id);
  for (const v1::AttemptRecord& a : r.attempts()) {
    std::string detail = absl::StrCat("attempt ", a.attempt(), ": ", CodeName(a.code()), " ",
                                      a.reason(), " -> ", v1::OutboxState_Name(a.state()));
    if (a.backoff_ms() > 0) absl::StrAppend(&detail, ", next in ", a.backoff_ms(), " ms");
    if (!a.span_id().empty()) absl::StrAppend(&detail, ", span ", a.span_id());
    Add(j, a.at_ms(), source, "attempt", c.command_id(), detail)->set_trace_id(trace_id);
  }
  // Moves no answer made: an operator's requeue or drop, a dead letter, an expiry; and
  // every move of a record kept before attempts were logged.
  for (const v1::Transition& t : r.history()) {
    const bool by_answer = r.attempts_size() > 0 &&
                           (t.to() == v1::ACKED || t.to() == v1::REJECTED ||
                            t.to() == v1::CONFLICT || t.to() == v1::RETRYABLE_FAILED ||
                            t.to() == v1::UNKNOWN || t.to() == v1::CLAIMED ||
                            t.to() == v1::SENDING);
    if (by_answer || t.from() == v1::OUTBOX_STATE_UNSPECIFIED) continue;
    Add(j, t.at_ms(), source, "state", c.command_id(),
        absl::StrCat(v1::OutboxState_Name(t.from()), " -> ", v1::OutboxState_Name(t.to()), ": ",
                     t.why()));
  }
}

}  // namespace

absl::StatusOr<v1::Journey> Explain(const std::string& query, const ExplainOptions& options,
                                    const std::vector<AgentView*>& agents,
                                    const std::vector<ShardView*>& shards) {
  EONCE_RETURN_IF_ERROR(CheckQuery(query));
  v1::Journey j;
  j.set_query(query);
  j.set_tenant(options.tenant);
  Evidence e;
  e.resolve_hint = options.resolve_hint;
  std::string agent_source;

  // The agent's record: the query as a command id, else as a key.
  for (AgentView* agent : agents) {
    auto got = agent->Get(query);
    if (got.ok() && !got->has_value()) got = agent->FindByKey(query);
    if (!got.ok()) {
      j.add_unread(Unread("the outbox", agent->name(), got.status()));
      continue;
    }
    if (got->has_value()) {
      e.record = **got;
      agent_source = absl::StrCat("agent ", agent->name());
      break;
    }
  }
  std::string command_id = e.record.has_value() ? e.record->command().command_id() : "";
  std::string key = e.record.has_value() ? e.record->command().idempotency_key() : "";

  // The sidecars' audit: by the command id, else the query as a command id, else as a key
  // (whose holder, the command that first used it, is the one explained).
  std::vector<std::pair<std::string, v1::AuditEvent>> audit;  // (shard, event)
  std::vector<bool> audit_failed(shards.size(), false);
  auto read_audit = [&](const std::string& id, const std::string& by_key) {
    for (size_t i = 0; i < shards.size(); ++i) {
      auto events = shards[i]->Audit(id, by_key);
      if (!events.ok()) {
        if (!audit_failed[i]) j.add_unread(Unread("the audit", shards[i]->name(), events.status()));
        audit_failed[i] = true;  // said once
        continue;
      }
      for (v1::AuditEvent& a : *events) audit.emplace_back(shards[i]->name(), std::move(a));
    }
  };
  read_audit(command_id.empty() ? query : command_id, "");
  if (audit.empty() && command_id.empty()) {
    read_audit("", query);
    for (const auto& [shard, a] : audit) {
      if (a.decision() != "conflict") {
        command_id = a.command_id();
        break;
      }
    }
    if (command_id.empty() && !audit.empty()) command_id = audit.front().second.command_id();
    audit.erase(std::remove_if(audit.begin(), audit.end(),
                               [&](const auto& p) { return p.second.command_id() != command_id; }),
                audit.end());
    // The record of the key's holder, if an agent has it.
    for (AgentView* agent : agents) {
      if (command_id.empty() || e.record.has_value()) break;
      auto got = agent->Get(command_id);
      if (got.ok() && got->has_value()) {
        e.record = **got;
        agent_source = absl::StrCat("agent ", agent->name());
      }
    }
  }
  if (command_id.empty()) command_id = query;
  for (const auto& [shard, a] : audit) {
    if (key.empty()) key = a.idempotency_key();
    e.audit.push_back(a);
  }
  if (key.empty()) key = query;

  // Parked records of the key.
  for (ShardView* shard : shards) {
    auto parked = shard->Parked();
    if (!parked.ok()) {
      j.add_unread(Unread("the parked records", shard->name(), parked.status()));
      continue;
    }
    for (const v1::ParkedRecord& p : *parked) {
      if (p.command_id() == command_id || p.idempotency_key() == key) e.parked = true;
    }
  }

  // Follow-ups: the ids the business's inbox derives from the command's.
  std::vector<std::string> follow_up_ids;
  for (int i = 0; i < kMaxFollowUps; ++i) {
    follow_up_ids.push_back(Inbox::FollowUpCommandId(options.tenant, command_id, i));
  }
  std::map<std::string, v1::OutboxRecord> relayed;  // follow-ups found in an agent
  for (const std::string& id : follow_up_ids) {
    bool found = false;
    for (AgentView* agent : agents) {
      auto got = agent->Get(id);
      if (got.ok() && got->has_value()) {
        relayed[id] = **got;
        found = true;
        break;
      }
    }
    if (!found) break;  // follow-ups are numbered from 0: none after a gap
  }

  // Effects at every business.
  std::set<std::string> wanted(follow_up_ids.begin(), follow_up_ids.end());
  wanted.insert(command_id);
  std::map<std::string, std::vector<std::pair<std::string, v1::Effect>>> effects;
  e.effects_read = !shards.empty();
  for (ShardView* shard : shards) {
    auto found = shard->Effects(wanted);
    if (!found.ok()) {
      e.effects_read = false;
      j.add_unread(Unread("the business's effects", shard->name(), found.status()));
      continue;
    }
    for (v1::Effect& f : *found) effects[f.command_id()].emplace_back(shard->name(), f);
  }
  e.effects = static_cast<int>(effects[command_id].size());
  if (e.effects > 0) e.effect_seq = effects[command_id].front().second.seq();
  for (const std::string& id : follow_up_ids) {
    if (!relayed.count(id) && effects[id].empty()) continue;
    v1::JourneyFollowUp* f = j.add_follow_ups();
    f->set_command_id(id);
    f->set_effects(static_cast<int>(effects[id].size()));
    for (const auto& [shard, effect] : effects[id]) {
      absl::StrAppend(f->mutable_where(), f->where().empty() ? "" : ", ", shard);
    }
    e.follow_ups.push_back(*f);
  }

  // The timeline.
  if (e.record.has_value()) {
    const v1::Command& c = e.record->command();
    j.set_entity(absl::StrCat(c.entity().type(), "/", c.entity().id()));
    j.set_target_method(c.target_method());
    AddAgentEvents(*e.record, agent_source, &j);
  }
  for (const auto& [shard, a] : audit) {
    if (j.target_method().empty()) j.set_target_method(a.operation());
    Add(&j, a.at_ms(), absl::StrCat("sidecar ", shard), a.decision(), a.command_id(),
        absl::StrCat(Meaning(a.decision()), a.result(),
                     a.fencing_token() > 0 ? absl::StrCat(", token ", a.fencing_token()) : "",
                     a.actor().empty() ? "" : absl::StrCat(", actor ", a.actor())))
        ->set_trace_id(a.trace_id());
  }
  for (const auto& [id, found] : effects) {
    for (const auto& [shard, f] : found) {
      if (j.entity().empty() && id == command_id) j.set_entity(f.entity());
      Add(&j, f.applied_at_ms(), absl::StrCat("business ", shard),
          id == command_id ? "applied" : "follow_up_applied", id,
          absl::StrCat("effect seq ", f.seq(), " on ", f.entity(), ", ", f.method(),
                       f.amount() != 0 ? absl::StrCat(", amount ", f.amount()) : ""))
          ->set_trace_id(f.trace_id());
    }
  }
  for (const auto& [id, r] : relayed) {
    Add(&j, r.created_at_ms(), agent_source, "follow_up_relayed", id,
        absl::StrCat(r.command().target_method(), " to ", r.command().entity().type(), "/",
                     r.command().entity().id(), ", ", v1::OutboxState_Name(r.state())))
        ->set_trace_id(TraceIdOf(r.command().trace()));
  }
  std::stable_sort(j.mutable_events()->begin(), j.mutable_events()->end(),
                   [](const v1::JourneyEvent& a, const v1::JourneyEvent& b) {
                     if (a.at_ms() != b.at_ms()) return a.at_ms() < b.at_ms();
                     return Rank(a) < Rank(b);
                   });

  j.set_command_id(command_id);
  j.set_idempotency_key(key);
  j.set_effects(e.effects);
  j.set_effects_read(e.effects_read);
  j.set_effect_seq(e.effect_seq);
  bool agree = e.effects_read && e.effects == 1;
  for (const v1::JourneyFollowUp& f : e.follow_ups) agree = agree && f.effects() == 1;
  j.set_books_agree(agree);
  VerdictLine verdict = Judge(command_id, key, e);
  j.set_verdict(verdict.verdict);
  j.set_verdict_text(verdict.text);
  return j;
}

}  // namespace eonce::explain
