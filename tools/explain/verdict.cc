#include "tools/explain/verdict.h"

#include "absl/strings/str_cat.h"

namespace eonce::explain {
namespace {

bool Saw(const Evidence& e, const std::string& decision) {
  for (const v1::AuditEvent& a : e.audit) {
    if (a.decision() == decision) return true;
  }
  return false;
}

// The last of the sidecar's decisions that settle a record, if any.
const v1::AuditEvent* LastSettling(const Evidence& e) {
  const v1::AuditEvent* last = nullptr;
  for (const v1::AuditEvent& a : e.audit) {
    const std::string& d = a.decision();
    if (d == "committed" || d == "rejected" || d == "recovered" || d == "parked_unknown" ||
        d == "resolved_applied" || d == "resolved_not_applied" || d == "refused" ||
        d == "invalid" || d == "unauthorized" || d == "expired" || d == "conflict") {
      last = &a;
    }
  }
  return last;
}

VerdictLine Line(v1::Verdict verdict, std::string text) { return VerdictLine{verdict, text}; }

}  // namespace

VerdictLine Judge(const std::string& command_id, const std::string& key, const Evidence& e) {
  const bool anything = e.record.has_value() || !e.audit.empty() || e.parked || e.effects > 0;
  if (!anything) {
    return Line(v1::VERDICT_NOT_FOUND, absl::StrCat("not found: no component read knows ", command_id));
  }
  if (e.effects > 1) {
    return Line(v1::VERDICT_APPLIED_MORE_THAN_ONCE,
                absl::StrCat("applied ", e.effects, " times: the books disagree"));
  }
  for (const v1::JourneyFollowUp& f : e.follow_ups) {
    if (f.effects() > 1) {
      return Line(v1::VERDICT_APPLIED_MORE_THAN_ONCE,
                  absl::StrCat("follow-up ", f.command_id(), " applied ", f.effects(),
                               " times: the books disagree"));
    }
  }
  const v1::AuditEvent* settling = LastSettling(e);
  const bool parked = e.parked || (settling != nullptr && settling->decision() == "parked_unknown");
  if (parked) {
    const std::string resolve = absl::StrCat(e.resolve_hint, " resolve --key=", key);
    if (e.effects == 1) {
      return Line(v1::VERDICT_PARKED, absl::StrCat("parked (what to do: the business holds its effect, seq ",
                                           e.effect_seq, "; resolve it as applied: ", resolve,
                                           " --applied --note=\"effect seq ", e.effect_seq,
                                           "\")"));
    }
    if (e.effects_read) {
      return Line(v1::VERDICT_PARKED,
                  absl::StrCat("parked (what to do: no business holds its effect; once you know "
                               "it was not applied, free the key: ",
                               resolve, " --not_applied --note=\"...\"; the agent sends it again)"));
    }
    return Line(v1::VERDICT_PARKED, absl::StrCat("parked (what to do: find out from the business "
                                         "whether it applied it, then ",
                                         resolve, " --applied or --not_applied)"));
  }
  const bool replayed = Saw(e, "duplicate_returned") ||
                        (e.record.has_value() && e.record->replay().replayed());
  const bool applied_per_components =
      (e.record.has_value() && e.record->state() == v1::ACKED) ||
      (settling != nullptr &&
       (settling->decision() == "committed" || settling->decision() == "recovered" ||
        settling->decision() == "resolved_applied"));
  if (e.effects == 1 || (!e.effects_read && applied_per_components)) {
    for (const v1::JourneyFollowUp& f : e.follow_ups) {
      if (f.effects() == 0) {
        return Line(v1::VERDICT_PENDING, absl::StrCat("pending (applied; its follow-up ", f.command_id(),
                                              " is not applied yet)"));
      }
    }
    const bool agent_says = e.record.has_value() && e.record->state() == v1::ACKED;
    std::string unconfirmed =
        e.effects == 1 ? ""
        : absl::StrCat(" (as ",
                       agent_says && settling != nullptr ? "the agent and the sidecar say"
                       : agent_says                      ? "the agent says"
                                                         : "the sidecar says",
                       "; the business was not read)");
    if (replayed) {
      return Line(v1::VERDICT_DUPLICATE,
                  absl::StrCat("duplicate (answered from the stored response; still applied "
                               "once)",
                               unconfirmed));
    }
    return Line(v1::VERDICT_APPLIED_ONCE, absl::StrCat("applied once", unconfirmed));
  }
  const v1::OutboxState state =
      e.record.has_value() ? e.record->state() : v1::OUTBOX_STATE_UNSPECIFIED;
  if (state == v1::CONFLICT || (settling != nullptr && settling->decision() == "conflict")) {
    std::string reason = settling != nullptr && settling->decision() == "conflict"
                             ? settling->result()
                             : e.record->last_error().reason();
    return Line(v1::VERDICT_CONFLICT,
                absl::StrCat("conflict (", reason, ": the key ", key,
                             " belongs to another payload or command; this one was not applied)"));
  }
  if (state == v1::REJECTED || state == v1::DEAD_LETTERED || state == v1::EXPIRED ||
      state == v1::DROPPED) {
    const v1::LastError& error = e.record->last_error();
    std::string why = error.reason().empty() ? v1::OutboxState_Name(state) : error.reason();
    if (!error.message().empty()) absl::StrAppend(&why, ": ", error.message());
    if (state == v1::DEAD_LETTERED) {
      absl::StrAppend(&why, "; dead-lettered after ", e.record->attempt(),
                      " attempts, requeue it with outboxctl requeue ", command_id);
    }
    return Line(v1::VERDICT_REJECTED, absl::StrCat("rejected (", why, ")"));
  }
  if (settling != nullptr && state == v1::OUTBOX_STATE_UNSPECIFIED &&
      settling->decision() != "committed" && settling->decision() != "recovered" &&
      settling->decision() != "resolved_applied" &&
      settling->decision() != "resolved_not_applied") {
    return Line(v1::VERDICT_REJECTED, absl::StrCat("rejected (", settling->decision(), ": ",
                                           settling->result(), ")"));
  }
  std::string where = e.record.has_value()
                          ? absl::StrCat("the agent holds it ", v1::OutboxState_Name(state),
                                         " after ", e.record->attempt(), " attempts")
                          : "no business holds its effect yet";
  return Line(v1::VERDICT_PENDING, absl::StrCat("pending (", where, ")"));
}

}  // namespace eonce::explain
