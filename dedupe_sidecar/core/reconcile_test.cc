// Reconcile is a call like any other: checked against the policy as a duplicate Submit of
// the command would be, answered only from outcomes a crash cannot take back, and audited.
// (Its admission is in tests/security/flood_test.cc, with the real server.)
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "dedupe_sidecar/core/deduper_test_fixture.h"

namespace eonce {
namespace {

constexpr char kTransfer[] = "/eonce.ledger.v1.Ledger/Transfer";

// Holds back the news that an outcome is durable until the test opens the gate: the
// window between an outcome's write (visible to reads) and its fsync, held open.
class GatedRecordStore : public RecordStore {
 public:
  using RecordStore::RecordStore;
  void WhenDurable(Record::State state, RocksStore::DurableFn done) override {
    if (!open_ && (state == Record::COMMITTED || state == Record::FAILED)) {
      held_.push_back(std::move(done));
      return;
    }
    RecordStore::WhenDurable(state, std::move(done));
  }
  void Open() {
    open_ = true;
    std::vector<RocksStore::DurableFn> held = std::move(held_);
    for (auto& done : held) RecordStore::WhenDurable(Record::COMMITTED, std::move(done));
  }

 private:
  bool open_ = false;
  std::vector<RocksStore::DurableFn> held_;
};

class ReconcileTest : public DeduperTest {
 protected:
  static Caller As(const std::string& workload, const std::string& actor = "",
                   int64_t epoch = 3) {
    Caller caller;
    caller.tenant = "acme";
    caller.workload = workload;
    caller.actor = actor;
    caller.credential_epoch = epoch;
    return caller;
  }

  // What the agent asks before it resends: the key, the command it expects there.
  static v1::ReconcileRequest For(const v1::Command& c) {
    v1::ReconcileRequest request;
    request.set_idempotency_key(c.idempotency_key());
    request.set_expect_command_id(c.command_id());
    request.set_expect_payload_sha256(c.payload_hash().sha256());
    return request;
  }

  void SetPolicy(const std::string& text) {
    absl::StatusOr<Policy> parsed = Policy::Parse(text);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    policy_->Set(std::move(*parsed));
  }

  // The audit events of `command_id`, as "decision result actor".
  std::vector<std::string> AuditOf(const std::string& command_id) {
    v1::QueryAuditRequest request;
    request.set_command_id(command_id);
    auto events = audit_->Query("acme", request);
    EXPECT_TRUE(events.ok()) << events.status();
    std::vector<std::string> out;
    for (const auto& e : *events) {
      out.push_back(e.decision() + " " + e.result() + " " + e.actor());
    }
    return out;
  }

  // A committed transfer by workload "agent" acting for alice, under a policy that lets
  // it; the policy is then changed by each test.
  v1::Command Committed() {
    SetPolicy(absl::StrCat("act acme agent alice\nallow acme alice ", kTransfer, "\n"));
    v1::Command c = Cmd("c1");
    upstream_.set_next_reply(FakeUpstream::Ok("the answer"));
    EXPECT_TRUE(SubmitAs(As("agent"), c).ok());
    return c;
  }
};

TEST_F(ReconcileTest, TheOwnerReadsTheOutcomeAndTheLookupIsAudited) {
  v1::Command c = Committed();
  auto found = deduper_->Reconcile(As("agent"), For(c));
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(found->state(), v1::RECORD_COMMITTED);
  EXPECT_EQ(found->result().response(), "the answer");
  EXPECT_EQ(AuditOf("c1"), (std::vector<std::string>{"committed OK alice",
                                                     "reconciled RECORD_COMMITTED alice"}));

  // A lookup by command id of one nothing holds is audited too, under that id.
  v1::ReconcileRequest unseen;
  unseen.set_command_id("never-sent");
  auto none = deduper_->Reconcile(As("agent"), unseen);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->state(), v1::RECORD_NOT_SEEN);
  EXPECT_EQ(AuditOf("never-sent"),
            (std::vector<std::string>{"reconciled RECORD_NOT_SEEN agent"}));
}

TEST_F(ReconcileTest, ARevokedWorkloadReadsNothingAndGetsWhatSubmitWouldSay) {
  v1::Command c = Committed();
  SetPolicy(absl::StrCat("act acme agent alice\nallow acme alice ", kTransfer,
                         "\nrevoke acme agent\n"));
  auto refused = deduper_->Reconcile(As("agent"), For(c));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied) << refused.status();
  EXPECT_EQ(ReasonOf(refused.status()), "CREDENTIAL_REVOKED");
  EXPECT_EQ(AuditOf("c1").back(), "unauthorized CREDENTIAL_REVOKED alice");
  // The same refusal a duplicate Submit of the command gets.
  EXPECT_EQ(ReasonOf(SubmitAs(As("agent"), c).status()), "CREDENTIAL_REVOKED");

  // Nor may it learn that a key is free.
  v1::ReconcileRequest unseen;
  unseen.set_idempotency_key("nothing-here");
  EXPECT_EQ(ReasonOf(deduper_->Reconcile(As("agent"), unseen).status()), "CREDENTIAL_REVOKED");

  // Revoked below an epoch: a certificate of that epoch is refused, whatever the caller
  // states; a newer one reads.
  SetPolicy(absl::StrCat("act acme agent alice\nallow acme alice ", kTransfer,
                         "\nrevoke acme agent below_epoch=5\n"));
  Caller old_certificate = As("agent", "", /*epoch=*/9);
  old_certificate.certificate_epoch = 4;
  EXPECT_EQ(ReasonOf(deduper_->Reconcile(old_certificate, For(c)).status()),
            "CREDENTIAL_REVOKED");
  Caller new_certificate = As("agent", "", /*epoch=*/0);
  new_certificate.certificate_epoch = 5;
  auto found = deduper_->Reconcile(new_certificate, For(c));
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(found->result().response(), "the answer");
}

// A leaked operator certificate is revoked as a workload's is: by name, or below an epoch.
// Until then it could read any key's answer, settle parked outcomes and move slots.
TEST_F(ReconcileTest, ARevokedOperatorIsNoOperator) {
  v1::Command c = Committed();
  Caller oncall = As("");
  oncall.operator_name = "oncall";
  oncall.certificate_epoch = 4;
  SetPolicy(absl::StrCat("act acme agent alice\nallow acme alice ", kTransfer,
                         "\noperator acme *\nplatform acme oncall\n"));
  ASSERT_TRUE(deduper_->Reconcile(oncall, For(c)).ok());
  ASSERT_TRUE(deduper_->RequireOperator(oncall).ok());
  ASSERT_TRUE(deduper_->RequirePlatformOperator(oncall).ok());

  for (const char* revoke : {"revoke acme oncall\n", "revoke acme oncall below_epoch=5\n"}) {
    SetPolicy(absl::StrCat("act acme agent alice\nallow acme alice ", kTransfer,
                           "\noperator acme *\nplatform acme oncall\n", revoke));
    EXPECT_EQ(ReasonOf(deduper_->Reconcile(oncall, For(c)).status()), "CREDENTIAL_REVOKED")
        << revoke;
    EXPECT_EQ(ReasonOf(deduper_->RequireOperator(oncall)), "CREDENTIAL_REVOKED") << revoke;
    EXPECT_EQ(ReasonOf(deduper_->RequirePlatformOperator(oncall)), "CREDENTIAL_REVOKED")
        << revoke;
    EXPECT_EQ(ReasonOf(deduper_->ListParked(oncall, 10).status()), "CREDENTIAL_REVOKED")
        << revoke;
  }
  // A certificate of the epoch the rule lets stand is an operator again.
  Caller renewed = oncall;
  renewed.certificate_epoch = 5;
  EXPECT_TRUE(deduper_->Reconcile(renewed, For(c)).ok());
  EXPECT_TRUE(deduper_->RequireOperator(renewed).ok());
}

TEST_F(ReconcileTest, AnActorThePolicyDoesNotAllowReadsNothing) {
  v1::Command c = Committed();
  // Another workload of the tenant, which may not act for alice.
  auto intruder = deduper_->Reconcile(As("intruder"), For(c));
  EXPECT_EQ(intruder.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(ReasonOf(intruder.status()), "ACTOR_NOT_PERMITTED");
  EXPECT_EQ(ReasonOf(SubmitAs(As("intruder"), c).status()), "ACTOR_NOT_PERMITTED");

  // Alice is no longer allowed the command's method: the record knows it.
  SetPolicy("act acme agent alice\nallow acme alice /eonce.ledger.v1.Ledger/OpenAccount\n");
  auto denied = deduper_->Reconcile(As("agent"), For(c));
  EXPECT_EQ(ReasonOf(denied.status()), "POLICY_DENIED") << denied.status();
  EXPECT_EQ(ReasonOf(SubmitAs(As("agent"), c).status()), "POLICY_DENIED");

  // An operator the policy names for the tenant may look up any key.
  SetPolicy("operator acme oncall\n");
  Caller oncall = As("");
  oncall.operator_name = "oncall";
  auto looked_up = deduper_->Reconcile(oncall, For(c));
  ASSERT_TRUE(looked_up.ok()) << looked_up.status();
  EXPECT_EQ(looked_up->state(), v1::RECORD_COMMITTED);
  EXPECT_EQ(AuditOf("c1").back(), "reconciled RECORD_COMMITTED operator:oncall");
  oncall.operator_name = "someone";
  EXPECT_FALSE(deduper_->Reconcile(oncall, For(c)).ok());
}

TEST_F(ReconcileTest, ACommandFinishedBeforeARevocationIsReplayedWhereTheOptionsSaySo) {
  DeduperOptions options;
  options.replay_after_revocation = true;
  Close();
  Open(options);
  v1::Command c = Committed();
  SetPolicy(absl::StrCat("act acme agent alice\nallow acme alice ", kTransfer,
                         "\nrevoke acme agent\n"));
  auto found = deduper_->Reconcile(As("agent"), For(c));
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(found->result().response(), "the answer");
  EXPECT_EQ(AuditOf("c1").back(), "reconciled RECORD_COMMITTED CREDENTIAL_REVOKED alice");
  // Without the payload it expects, it is not a duplicate of that command.
  v1::ReconcileRequest by_key;
  by_key.set_idempotency_key(c.idempotency_key());
  EXPECT_EQ(ReasonOf(deduper_->Reconcile(As("agent"), by_key).status()), "CREDENTIAL_REVOKED");
  // Nor without the command id, as a duplicate Submit names it.
  v1::ReconcileRequest no_id = For(c);
  no_id.clear_expect_command_id();
  EXPECT_EQ(ReasonOf(deduper_->Reconcile(As("agent"), no_id).status()), "CREDENTIAL_REVOKED");
  // Nor where the act and allow rules would refuse the lookup, revocation aside.
  SetPolicy(absl::StrCat("act acme agent bob\nallow acme alice ", kTransfer,
                         "\nrevoke acme agent\n"));
  EXPECT_EQ(ReasonOf(deduper_->Reconcile(As("agent"), For(c)).status()), "CREDENTIAL_REVOKED");
}

// An outcome is handed out only once a crash cannot take it back: while its fsync is still
// to come, a lookup says PROCESSING (and the agent's Submit then waits for the fsync).
TEST_F(ReconcileTest, AnOutcomeNotYetDurableIsNotHandedOut) {
  GatedRecordStore gated(*rocks_, clock_, retention_);
  Deduper deduper(gated, *audit_, upstream_, *policy_, clock_, options_);
  v1::Command c = Cmd("c1");
  upstream_.set_next_reply(FakeUpstream::Ok("the answer"));
  std::optional<absl::StatusOr<v1::SubmitResponse>> first;
  deduper.Submit(As("agent"), c, [&](absl::StatusOr<v1::SubmitResponse> r) { first = r; });
  ASSERT_FALSE(first.has_value());  // written, its answer waiting for the fsync

  auto pending = deduper.Reconcile(As("agent"), For(c));
  ASSERT_TRUE(pending.ok()) << pending.status();
  EXPECT_EQ(pending->state(), v1::RECORD_PROCESSING);
  EXPECT_FALSE(pending->has_result());
  v1::ReconcileRequest by_id;
  by_id.set_command_id("c1");
  EXPECT_EQ(deduper.Reconcile(As("agent"), by_id)->state(), v1::RECORD_PROCESSING);

  gated.Open();
  ASSERT_TRUE(first.has_value() && first->ok());
  auto durable = deduper.Reconcile(As("agent"), For(c));
  ASSERT_TRUE(durable.ok()) << durable.status();
  EXPECT_EQ(durable->state(), v1::RECORD_COMMITTED);
  EXPECT_EQ(durable->result().response(), "the answer");
}

}  // namespace
}  // namespace eonce
