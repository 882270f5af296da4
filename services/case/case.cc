#include "services/case/case.h"

#include "absl/strings/str_cat.h"
#include "common/command/command.h"
#include "common/base/status.h"

namespace eonce {
namespace {

constexpr char kCasesCf[] = "cases";

using case_mgmt::v1::Status;

// Allowed moves. Everything else is INVALID_TRANSITION.
struct Edge {
  Status from;
  Status to;
};
constexpr Edge kTransitions[] = {
    {case_mgmt::v1::OPEN, case_mgmt::v1::IN_REVIEW},
    {case_mgmt::v1::OPEN, case_mgmt::v1::CLOSED},
    {case_mgmt::v1::IN_REVIEW, case_mgmt::v1::OPEN},
    {case_mgmt::v1::IN_REVIEW, case_mgmt::v1::ESCALATED},
    {case_mgmt::v1::IN_REVIEW, case_mgmt::v1::APPROVED},
    {case_mgmt::v1::IN_REVIEW, case_mgmt::v1::REJECTED},
    {case_mgmt::v1::ESCALATED, case_mgmt::v1::IN_REVIEW},
    {case_mgmt::v1::ESCALATED, case_mgmt::v1::APPROVED},
    {case_mgmt::v1::ESCALATED, case_mgmt::v1::REJECTED},
    {case_mgmt::v1::APPROVED, case_mgmt::v1::CLOSED},
    {case_mgmt::v1::REJECTED, case_mgmt::v1::OPEN},
    {case_mgmt::v1::REJECTED, case_mgmt::v1::CLOSED},
};

Applied Reject(absl::StatusCode code, const std::string& reason, const std::string& detail) {
  Applied applied;
  applied.result = RejectionResult(code, reason, detail);
  return applied;
}

}  // namespace

bool TransitionAllowed(Status from, Status to) {
  for (const Edge& edge : kTransitions) {
    if (edge.from == from && edge.to == to) return true;
  }
  return false;
}

std::vector<ColumnFamilySpec> CaseCore::ColumnFamilies() {
  return {ColumnFamilySpec{kCasesCf, {}}};
}

absl::StatusOr<std::optional<case_mgmt::v1::Case>> CaseCore::Read(const std::string& id) {
  std::string value;
  rocksdb::Status status = store_.Get(kCasesCf, id, &value);
  if (status.IsNotFound()) return std::optional<case_mgmt::v1::Case>();
  EONCE_RETURN_IF_ERROR(FromRocks(status, "read case"));
  case_mgmt::v1::Case c;
  if (!c.ParseFromString(value)) {
    return Error(absl::StatusCode::kDataLoss, "STORE_CORRUPT", "undecodable case");
  }
  return std::optional<case_mgmt::v1::Case>(std::move(c));
}

absl::StatusOr<case_mgmt::v1::Case> CaseCore::GetCase(const std::string& id) {
  EONCE_ASSIGN_OR_RETURN(auto c, Read(id));
  if (!c.has_value()) {
    return Error(absl::StatusCode::kNotFound, "NO_SUCH_CASE", absl::StrCat("no case ", id));
  }
  return *c;
}

absl::StatusOr<v1::CallResult> CaseCore::CreateCase(const CallIdentity& id,
                                                    const case_mgmt::v1::CreateCaseRequest& request) {
  std::string entity = absl::StrCat("case/", request.id());
  return inbox_.Run(id, {entity}, [&](rocksdb::WriteBatch* batch, uint64_t) -> absl::StatusOr<Applied> {
    if (!ValidateName(request.id(), 64, "id").ok() || request.title().size() > 512) {
      return Reject(absl::StatusCode::kInvalidArgument, "INVALID_REQUEST",
                    "id must be 1..64 letters, digits or ._@-; title at most 512 bytes");
    }
    EONCE_ASSIGN_OR_RETURN(auto existing, Read(request.id()));
    if (existing.has_value()) {
      return Reject(absl::StatusCode::kAlreadyExists, "CASE_EXISTS",
                    absl::StrCat("case ", request.id(), " exists"));
    }
    case_mgmt::v1::Case c;
    c.set_id(request.id());
    c.set_status(case_mgmt::v1::OPEN);
    c.set_revision(1);
    case_mgmt::v1::HistoryEntry* h = c.add_history();
    h->set_revision(1);
    h->set_what(absl::StrCat("created: ", request.title()));
    h->set_actor(id.actor);
    h->set_command_id(id.command_id);
    batch->Put(store_.cf(kCasesCf), c.id(), c.SerializeAsString());
    Applied applied;
    applied.result.set_response(c.SerializeAsString());
    v1::Effect effect;
    effect.set_entity(entity);
    effect.set_method("/eonce.case_mgmt.v1.Cases/CreateCase");
    effect.set_revision(1);
    applied.effect = effect;
    return applied;
  });
}

absl::StatusOr<v1::CallResult> CaseCore::Mutate(const CallIdentity& id, const std::string& case_id,
                                                int64_t expected_revision,
                                                const std::string& method, const Change& change) {
  std::string entity = absl::StrCat("case/", case_id);
  return inbox_.Run(id, {entity}, [&](rocksdb::WriteBatch* batch, uint64_t) -> absl::StatusOr<Applied> {
    EONCE_ASSIGN_OR_RETURN(auto found, Read(case_id));
    if (!found.has_value()) {
      return Reject(absl::StatusCode::kNotFound, "NO_SUCH_CASE", absl::StrCat("no case ", case_id));
    }
    case_mgmt::v1::Case c = std::move(*found);
    if (c.revision() != expected_revision) {
      return Reject(absl::StatusCode::kAborted, "REVISION_CONFLICT",
                    absl::StrCat("case ", case_id, " is at revision ", c.revision(),
                                 ", the command expected ", expected_revision));
    }
    auto what = change(&c);
    if (!what.ok()) {
      Applied rejected;
      rejected.result = RejectionResult(what.status().code(), ReasonOf(what.status()),
                                        std::string(what.status().message()));
      return rejected;
    }
    c.set_revision(c.revision() + 1);
    case_mgmt::v1::HistoryEntry* h = c.add_history();
    h->set_revision(c.revision());
    h->set_what(*what);
    h->set_actor(id.actor);
    h->set_command_id(id.command_id);
    if (c.history_size() > kMaxHistory) {
      c.mutable_history()->DeleteSubrange(0, c.history_size() - kMaxHistory);
    }
    batch->Put(store_.cf(kCasesCf), c.id(), c.SerializeAsString());
    Applied applied;
    applied.result.set_response(c.SerializeAsString());
    v1::Effect effect;
    effect.set_entity(entity);
    effect.set_method(method);
    effect.set_revision(c.revision());
    applied.effect = effect;
    return applied;
  });
}

absl::StatusOr<v1::CallResult> CaseCore::Transition(const CallIdentity& id,
                                                    const case_mgmt::v1::TransitionRequest& request) {
  return Mutate(id, request.id(), request.expected_revision(),
                "/eonce.case_mgmt.v1.Cases/Transition",
                [&](case_mgmt::v1::Case* c) -> absl::StatusOr<std::string> {
                  if (!TransitionAllowed(c->status(), request.next_status())) {
                    return Error(absl::StatusCode::kFailedPrecondition, "INVALID_TRANSITION",
                                 absl::StrCat(case_mgmt::v1::Status_Name(c->status()), " -> ",
                                              case_mgmt::v1::Status_Name(request.next_status()),
                                              " is not allowed"));
                  }
                  std::string what =
                      absl::StrCat(case_mgmt::v1::Status_Name(c->status()), " -> ",
                                   case_mgmt::v1::Status_Name(request.next_status()), " (",
                                   request.reason_code().substr(0, 64), ")");
                  c->set_status(request.next_status());
                  return what;
                });
}

absl::StatusOr<v1::CallResult> CaseCore::Assign(const CallIdentity& id,
                                                const case_mgmt::v1::AssignRequest& request) {
  return Mutate(id, request.id(), request.expected_revision(), "/eonce.case_mgmt.v1.Cases/Assign",
                [&](case_mgmt::v1::Case* c) -> absl::StatusOr<std::string> {
                  if (!ValidateName(request.assignee(), 128, "assignee").ok()) {
                    return Error(absl::StatusCode::kInvalidArgument, "INVALID_REQUEST",
                                 "assignee must be 1..128 letters, digits or ._@-");
                  }
                  if (c->status() == case_mgmt::v1::CLOSED) {
                    return Error(absl::StatusCode::kFailedPrecondition, "CASE_CLOSED",
                                 "a closed case cannot be assigned");
                  }
                  c->set_assignee(request.assignee());
                  return absl::StrCat("assigned to ", request.assignee());
                });
}

absl::StatusOr<v1::CallResult> CaseCore::AddNote(const CallIdentity& id,
                                                 const case_mgmt::v1::AddNoteRequest& request) {
  return Mutate(id, request.id(), request.expected_revision(), "/eonce.case_mgmt.v1.Cases/AddNote",
                [&](case_mgmt::v1::Case* c) -> absl::StatusOr<std::string> {
                  if (request.note().empty() || request.note().size() > kMaxNoteBytes) {
                    return Error(absl::StatusCode::kInvalidArgument, "INVALID_REQUEST",
                                 absl::StrCat("note must be 1..", kMaxNoteBytes, " bytes"));
                  }
                  if (c->notes_size() >= kMaxNotes) {
                    return Error(absl::StatusCode::kFailedPrecondition, "TOO_MANY_NOTES",
                                 absl::StrCat("a case holds at most ", kMaxNotes, " notes"));
                  }
                  c->add_notes(request.note());
                  return std::string("note added");
                });
}

}  // namespace eonce
