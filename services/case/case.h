// CaseCore: regulatory case management behind the inbox.
//
// Create a case, move its status along the transitions table, assign it, add notes.
// Every mutation names the revision it expects; a mismatch is a terminal conflict
// (ABORTED, REVISION_CONFLICT), so a command built against an old view never lands on a
// newer one. A case keeps its last kMaxHistory history entries and kMaxNotes notes.
// Thread-safe (the inbox serializes calls on one case). Store and inbox outlive it.
#ifndef EONCE_SERVICES_CASE_CASE_H_
#define EONCE_SERVICES_CASE_CASE_H_

#include <vector>

#include "absl/status/statusor.h"
#include "common/store/rocks.h"
#include "eonce/case/v1/case.pb.h"
#include "services/inbox/inbox.h"

namespace eonce {


// The transitions table: may a case in `from` move to `to`?
bool TransitionAllowed(case_mgmt::v1::Status from, case_mgmt::v1::Status to);

class CaseCore {
 public:
  static constexpr int kMaxHistory = 100;
  static constexpr int kMaxNotes = 100;
  static constexpr size_t kMaxNoteBytes = 4096;

  static std::vector<ColumnFamilySpec> ColumnFamilies();
  CaseCore(RocksStore& store, Inbox& inbox) : store_(store), inbox_(inbox) {}

  absl::StatusOr<v1::CallResult> CreateCase(const CallIdentity& id,
                                            const case_mgmt::v1::CreateCaseRequest& request);
  absl::StatusOr<v1::CallResult> Transition(const CallIdentity& id,
                                            const case_mgmt::v1::TransitionRequest& request);
  absl::StatusOr<v1::CallResult> Assign(const CallIdentity& id,
                                        const case_mgmt::v1::AssignRequest& request);
  absl::StatusOr<v1::CallResult> AddNote(const CallIdentity& id,
                                         const case_mgmt::v1::AddNoteRequest& request);
  // NOT_FOUND for an unknown case.
  absl::StatusOr<case_mgmt::v1::Case> GetCase(const std::string& id);

 private:
  using Change = std::function<absl::StatusOr<std::string>(case_mgmt::v1::Case* c)>;
  // Reads the case, checks the revision, applies `change` (which returns the history
  // text or a rejection), bumps the revision and writes it with its effect.
  absl::StatusOr<v1::CallResult> Mutate(const CallIdentity& id, const std::string& case_id,
                                        int64_t expected_revision, const std::string& method,
                                        const Change& change);
  absl::StatusOr<std::optional<case_mgmt::v1::Case>> Read(const std::string& id);

  RocksStore& store_;
  Inbox& inbox_;
};

}  // namespace eonce

#endif  // EONCE_SERVICES_CASE_CASE_H_
