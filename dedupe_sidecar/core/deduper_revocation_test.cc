// What a revoked credential may still hear with --replay_after_revocation: the stored
// answer of a command it finished before the revocation, and nothing else.
#include <string>
#include <vector>

#include "dedupe_sidecar/core/deduper_test_fixture.h"

namespace eonce {
namespace {

// A new command (another command id) that reuses a finished command's key and payload is
// not a duplicate: the revoked credential may not send it, and must not be handed the
// other command's answer as if it were its own.
TEST_F(DeduperTest, AfterARevocationOnlyTheFinishedCommandItselfIsReplayed) {
  DeduperOptions replay;
  replay.replay_after_revocation = true;
  Restart(replay);
  v1::Command first = Cmd("c1");
  first.set_idempotency_key("invoice-42");
  first.set_credential_epoch(1);
  FillPayloadHash(&first);
  upstream_.set_next_reply(FakeUpstream::Ok("paid invoice 42"));
  ASSERT_TRUE(Submit(first).ok());

  policy_->Set(
      *Policy::Parse("act acme * *\nallow acme alice *\nrevoke acme alice below_epoch=2\n"));
  auto replayed = Submit(first);
  ASSERT_TRUE(replayed.ok()) << replayed.status();
  EXPECT_EQ(replayed->disposition(), v1::REPLAYED);
  EXPECT_EQ(replayed->result().response(), "paid invoice 42");

  v1::Command second = first;
  second.set_command_id("c2");  // the same key and the same payload
  ASSERT_EQ(second.payload_hash().sha256(), first.payload_hash().sha256());
  auto refused = Submit(second);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(ReasonOf(refused.status()), "CREDENTIAL_REVOKED");
  EXPECT_EQ(upstream_.forwards(), 1u);
  EXPECT_EQ(AuditDecisions("c1"), (std::vector<std::string>{"committed", "duplicate_returned"}));
  EXPECT_EQ(AuditDecisions("c2"), std::vector<std::string>{"unauthorized"});

  // Nor does a credential the act and allow rules never let through: with the actor's
  // method no longer allowed, the finished command itself is refused too.
  policy_->Set(*Policy::Parse(
      "act acme * *\nallow acme alice /other.Service/Method\nrevoke acme alice below_epoch=2\n"));
  EXPECT_EQ(ReasonOf(Submit(first).status()), "CREDENTIAL_REVOKED");
  policy_->Set(
      *Policy::Parse("act acme * *\nallow acme alice *\nrevoke acme alice below_epoch=2\n"));

  // The same command id with another payload is no duplicate either.
  v1::Command changed = first;
  changed.set_request("transfer 11");
  FillPayloadHash(&changed);
  EXPECT_EQ(ReasonOf(Submit(changed).status()), "CREDENTIAL_REVOKED");
}

}  // namespace
}  // namespace eonce
