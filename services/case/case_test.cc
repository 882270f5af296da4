#include "services/case/case.h"

#include "common/rpc/grpc_status.h"
#include "gtest/gtest.h"
#include "tests/util/temp_dir.h"

namespace eonce {
namespace {

using case_mgmt::v1::Status;

TEST(TransitionsTest, TheTable) {
  EXPECT_TRUE(TransitionAllowed(case_mgmt::v1::OPEN, case_mgmt::v1::IN_REVIEW));
  EXPECT_TRUE(TransitionAllowed(case_mgmt::v1::IN_REVIEW, case_mgmt::v1::APPROVED));
  EXPECT_TRUE(TransitionAllowed(case_mgmt::v1::APPROVED, case_mgmt::v1::CLOSED));
  EXPECT_TRUE(TransitionAllowed(case_mgmt::v1::REJECTED, case_mgmt::v1::OPEN));
  EXPECT_FALSE(TransitionAllowed(case_mgmt::v1::OPEN, case_mgmt::v1::APPROVED));
  EXPECT_FALSE(TransitionAllowed(case_mgmt::v1::CLOSED, case_mgmt::v1::OPEN));
  EXPECT_FALSE(TransitionAllowed(case_mgmt::v1::APPROVED, case_mgmt::v1::REJECTED));
  EXPECT_FALSE(TransitionAllowed(case_mgmt::v1::OPEN, case_mgmt::v1::OPEN));
  // No status may move to UNSPECIFIED.
  for (int s = 0; s <= case_mgmt::v1::CLOSED; ++s) {
    EXPECT_FALSE(TransitionAllowed(static_cast<Status>(s), case_mgmt::v1::STATUS_UNSPECIFIED));
  }
}

class CaseTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    auto families = CaseCore::ColumnFamilies();
    for (auto& f : Inbox::ColumnFamilies(clock_)) families.push_back(f);
    auto store = RocksStore::Open(testing::FreshDir("case"), families, StoreOptions());
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    inbox_ = std::make_unique<Inbox>(*store_, clock_, GetParam());
    core_ = std::make_unique<CaseCore>(*store_, *inbox_);
    case_mgmt::v1::CreateCaseRequest create;
    create.set_id("k1");
    create.set_title("suspicious transfer");
    auto created = core_->CreateCase(Id("create"), create);
    ASSERT_TRUE(created.ok() && created->code() == 0);
  }

  CallIdentity Id(const std::string& command_id) {
    CallIdentity id;
    id.command_id = command_id;
    id.tenant = "acme";
    id.actor = "officer";
    return id;
  }

  v1::CallResult Move(const std::string& command_id, int64_t expected, Status to) {
    case_mgmt::v1::TransitionRequest t;
    t.set_id("k1");
    t.set_expected_revision(expected);
    t.set_next_status(to);
    return *core_->Transition(Id(command_id), t);
  }

  static std::string Reason(const v1::CallResult& r) {
    std::optional<v1::Rejection> rejection = RejectionOf(r.error_details());
    return rejection.has_value() ? rejection->reason() : "";
  }

  ManualClock clock_;
  std::unique_ptr<RocksStore> store_;
  std::unique_ptr<Inbox> inbox_;
  std::unique_ptr<CaseCore> core_;
};

TEST_P(CaseTest, TransitionsFollowTheTableAndBumpTheRevision) {
  EXPECT_EQ(Move("m1", 1, case_mgmt::v1::IN_REVIEW).code(), 0);
  v1::CallResult skip = Move("m2", 2, case_mgmt::v1::CLOSED);
  EXPECT_EQ(skip.code(), static_cast<int>(absl::StatusCode::kFailedPrecondition));
  EXPECT_EQ(Reason(skip), "INVALID_TRANSITION");
  EXPECT_EQ(Move("m3", 2, case_mgmt::v1::APPROVED).code(), 0);
  auto c = core_->GetCase("k1");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->status(), case_mgmt::v1::APPROVED);
  EXPECT_EQ(c->revision(), 3);
  ASSERT_EQ(c->history_size(), 3);
  EXPECT_EQ(c->history(2).command_id(), "m3");
}

TEST_P(CaseTest, StaleRevisionIsATerminalConflict) {
  ASSERT_EQ(Move("m1", 1, case_mgmt::v1::IN_REVIEW).code(), 0);
  v1::CallResult stale = Move("m2", 1, case_mgmt::v1::CLOSED);
  EXPECT_EQ(stale.code(), static_cast<int>(absl::StatusCode::kAborted));
  EXPECT_EQ(Reason(stale), "REVISION_CONFLICT");
  EXPECT_EQ(core_->GetCase("k1")->revision(), 2);
}

TEST_P(CaseTest, AssignAndNotesHaveLimits) {
  case_mgmt::v1::AssignRequest assign;
  assign.set_id("k1");
  assign.set_expected_revision(1);
  assign.set_assignee("dana");
  EXPECT_EQ(core_->Assign(Id("a1"), assign)->code(), 0);
  case_mgmt::v1::AddNoteRequest note;
  note.set_id("k1");
  note.set_expected_revision(2);
  note.set_note(std::string(CaseCore::kMaxNoteBytes + 1, 'x'));
  EXPECT_EQ(Reason(*core_->AddNote(Id("n1"), note)), "INVALID_REQUEST");
  note.set_note("called the bank");
  EXPECT_EQ(core_->AddNote(Id("n2"), note)->code(), 0);
  auto c = core_->GetCase("k1");
  EXPECT_EQ(c->assignee(), "dana");
  ASSERT_EQ(c->notes_size(), 1);
  EXPECT_EQ(core_->GetCase("nope").status().code(), absl::StatusCode::kNotFound);
}

TEST_P(CaseTest, RepeatedCommandTransitionsOnceInInboxModeAndConflictsInLegacyMode) {
  v1::CallResult first = Move("same", 1, case_mgmt::v1::IN_REVIEW);
  v1::CallResult second = Move("same", 1, case_mgmt::v1::IN_REVIEW);
  ASSERT_EQ(first.code(), 0);
  if (GetParam()) {
    // Legacy: the repeat is applied again, and only the revision check stops it.
    EXPECT_EQ(Reason(second), "REVISION_CONFLICT");
  } else {
    EXPECT_EQ(second.SerializeAsString(), first.SerializeAsString());
  }
  EXPECT_EQ(core_->GetCase("k1")->revision(), 2);
}

INSTANTIATE_TEST_SUITE_P(Modes, CaseTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Legacy" : "Inbox"; });

}  // namespace
}  // namespace eonce
