// The explainer against fake views: the verdict for each way a command can end, the
// timeline's order, a partial journey when a component cannot be read, and bad queries.
#include "tools/explain/explainer.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "services/inbox/inbox.h"
#include "tools/explain/render.h"

namespace eonce::explain {
namespace {

class FakeAgent : public AgentView {
 public:
  std::string name() const override { return "agent0"; }
  absl::StatusOr<std::optional<v1::OutboxRecord>> Get(const std::string& id) override {
    if (!down.ok()) return down;
    auto it = records.find(id);
    if (it == records.end()) return std::nullopt;
    return it->second;
  }
  absl::StatusOr<std::optional<v1::OutboxRecord>> FindByKey(const std::string& key) override {
    if (!down.ok()) return down;
    for (const auto& [id, r] : records) {
      if (r.command().idempotency_key() == key) return r;
    }
    return std::nullopt;
  }
  std::map<std::string, v1::OutboxRecord> records;
  absl::Status down;
};

class FakeShard : public ShardView {
 public:
  explicit FakeShard(std::string name) : name_(std::move(name)) {}
  std::string name() const override { return name_; }
  absl::StatusOr<std::vector<v1::AuditEvent>> Audit(const std::string& id,
                                                    const std::string& key) override {
    if (!down.ok()) return down;
    std::vector<v1::AuditEvent> out;
    for (const auto& a : audit) {
      if (id.empty() ? a.idempotency_key() == key : a.command_id() == id) out.push_back(a);
    }
    return out;
  }
  absl::StatusOr<std::vector<v1::ParkedRecord>> Parked() override {
    if (!down.ok()) return down;
    return parked;
  }
  absl::StatusOr<std::vector<v1::Effect>> Effects(const std::set<std::string>& ids) override {
    if (!down.ok()) return down;
    std::vector<v1::Effect> out;
    for (const auto& e : effects) {
      if (ids.count(e.command_id())) out.push_back(e);
    }
    return out;
  }
  std::vector<v1::AuditEvent> audit;
  std::vector<v1::ParkedRecord> parked;
  std::vector<v1::Effect> effects;
  absl::Status down;

 private:
  std::string name_;
};

v1::OutboxRecord Record(const std::string& id, v1::OutboxState state) {
  v1::OutboxRecord r;
  r.mutable_command()->set_command_id(id);
  r.mutable_command()->set_idempotency_key("key-" + id);
  r.mutable_command()->set_target_method("/eonce.ledger.v1.Ledger/Transfer");
  r.mutable_command()->mutable_entity()->set_type("account");
  r.mutable_command()->mutable_entity()->set_id("a");
  r.set_created_at_ms(1'000);
  r.set_state(state);
  r.set_attempt(1);
  v1::AttemptRecord* a = r.add_attempts();
  a->set_attempt(1);
  a->set_at_ms(1'300);
  a->set_state(state);
  a->set_reason(state == v1::ACKED ? "APPLIED" : "X");
  return r;
}

v1::AuditEvent Audit(const std::string& id, const std::string& decision, int64_t at_ms,
                     const std::string& result = "OK") {
  v1::AuditEvent a;
  a.set_command_id(id);
  a.set_idempotency_key("key-" + id);
  a.set_decision(decision);
  a.set_at_ms(at_ms);
  a.set_result(result);
  return a;
}

v1::Effect Effect(const std::string& id, uint64_t seq, int64_t at_ms) {
  v1::Effect e;
  e.set_command_id(id);
  e.set_seq(seq);
  e.set_applied_at_ms(at_ms);
  e.set_entity("account/a");
  return e;
}

class ExplainerTest : public ::testing::Test {
 protected:
  v1::Journey Run(const std::string& query) {
    ExplainOptions options;
    options.tenant = "acme";
    auto j = Explain(query, options, {&agent_}, {&s0_, &s1_});
    EXPECT_TRUE(j.ok()) << j.status();
    return j.ok() ? *j : v1::Journey();
  }
  FakeAgent agent_;
  FakeShard s0_{"s0"};
  FakeShard s1_{"s1"};
};

TEST_F(ExplainerTest, AppliedOnceInTimeOrder) {
  agent_.records["c1"] = Record("c1", v1::ACKED);
  s0_.audit = {Audit("c1", "committed", 1'200)};
  s0_.effects = {Effect("c1", 7, 1'100)};
  v1::Journey j = Run("c1");
  EXPECT_EQ(j.verdict(), v1::VERDICT_APPLIED_ONCE);
  EXPECT_EQ(j.verdict_text(), "applied once");
  EXPECT_EQ(j.effect_seq(), 7u);
  EXPECT_TRUE(j.books_agree());
  std::vector<std::string> kinds;
  for (const auto& e : j.events()) kinds.push_back(e.kind());
  EXPECT_EQ(kinds, (std::vector<std::string>{"enqueued", "applied", "committed", "attempt"}));
  for (const auto& e : j.events()) EXPECT_TRUE(e.trace_id().empty());
  EXPECT_NE(RenderText(j).find("verdict: applied once\n"), std::string::npos) << RenderText(j);
  EXPECT_NE(RenderJson(j).find("\"verdict\":\"VERDICT_APPLIED_ONCE\""), std::string::npos);
}

TEST_F(ExplainerTest, ATracedCommandsEventsCarryItsTraceAndEachAttemptItsSpan) {
  const std::string trace = "4bf92f3577b34da6a3ce929d0e0e4736";
  v1::OutboxRecord r = Record("c1", v1::ACKED);
  r.mutable_command()->mutable_trace()->set_traceparent(
      absl::StrCat("00-", trace, "-00f067aa0ba902b7-01"));
  r.mutable_attempts(0)->set_span_id("b7ad6b7169203331");
  agent_.records["c1"] = r;
  v1::AuditEvent audit = Audit("c1", "committed", 1'200);
  audit.set_trace_id(trace);
  s0_.audit = {audit};
  v1::Effect effect = Effect("c1", 7, 1'100);
  effect.set_trace_id(trace);
  s0_.effects = {effect};
  v1::Journey j = Run("c1");
  ASSERT_EQ(j.events_size(), 4);
  for (const auto& e : j.events()) EXPECT_EQ(e.trace_id(), trace) << e.kind();
  const std::string text = RenderText(j);
  EXPECT_NE(text.find("span b7ad6b7169203331"), std::string::npos) << text;
  EXPECT_NE(text.find(absl::StrCat("trace ", trace)), std::string::npos) << text;
}

TEST_F(ExplainerTest, FoundByKeyAtTheSidecarAlone) {
  s1_.audit = {Audit("c1", "committed", 1'200)};
  s1_.effects = {Effect("c1", 3, 1'100)};
  v1::Journey j = Run("key-c1");
  EXPECT_EQ(j.command_id(), "c1");
  EXPECT_EQ(j.verdict(), v1::VERDICT_APPLIED_ONCE);
}

TEST_F(ExplainerTest, DuplicateIsStillAppliedOnce) {
  agent_.records["c1"] = Record("c1", v1::ACKED);
  s0_.audit = {Audit("c1", "committed", 1'200), Audit("c1", "duplicate_returned", 1'500)};
  s0_.effects = {Effect("c1", 7, 1'100)};
  v1::Journey j = Run("c1");
  EXPECT_EQ(j.verdict(), v1::VERDICT_DUPLICATE);
  EXPECT_EQ(j.verdict_text(), "duplicate (answered from the stored response; still applied once)");
}

TEST_F(ExplainerTest, TwoEffectsAreAppliedMoreThanOnce) {
  agent_.records["c1"] = Record("c1", v1::ACKED);
  s0_.effects = {Effect("c1", 7, 1'100)};
  s1_.effects = {Effect("c1", 2, 1'150)};
  v1::Journey j = Run("c1");
  EXPECT_EQ(j.verdict(), v1::VERDICT_APPLIED_MORE_THAN_ONCE);
  EXPECT_FALSE(j.books_agree());
}

TEST_F(ExplainerTest, Conflict) {
  v1::OutboxRecord r = Record("c2", v1::CONFLICT);
  r.mutable_last_error()->set_reason("IDEMPOTENCY_CONFLICT");
  agent_.records["c2"] = r;
  s0_.audit = {Audit("c2", "conflict", 1'200, "IDEMPOTENCY_CONFLICT")};
  v1::Journey j = Run("c2");
  EXPECT_EQ(j.verdict(), v1::VERDICT_CONFLICT);
  EXPECT_NE(j.verdict_text().find("IDEMPOTENCY_CONFLICT"), std::string::npos);
}

TEST_F(ExplainerTest, ParkedSaysWhatToDo) {
  agent_.records["c3"] = Record("c3", v1::UNKNOWN);
  s0_.audit = {Audit("c3", "parked_unknown", 1'200, "OUTCOME_UNKNOWN")};
  v1::ParkedRecord p;
  p.set_command_id("c3");
  p.set_idempotency_key("key-c3");
  s0_.parked = {p};
  v1::Journey j = Run("c3");
  EXPECT_EQ(j.verdict(), v1::VERDICT_PARKED);
  EXPECT_NE(j.verdict_text().find("resolve --key=key-c3 --not_applied"), std::string::npos)
      << j.verdict_text();
}

TEST_F(ExplainerTest, BusinessRejection) {
  v1::OutboxRecord r = Record("c4", v1::REJECTED);
  r.mutable_last_error()->set_reason("INSUFFICIENT_FUNDS");
  agent_.records["c4"] = r;
  s0_.audit = {Audit("c4", "rejected", 1'200, "INSUFFICIENT_FUNDS")};
  v1::Journey j = Run("c4");
  EXPECT_EQ(j.verdict(), v1::VERDICT_REJECTED);
  EXPECT_EQ(j.verdict_text(), "rejected (INSUFFICIENT_FUNDS)");
}

TEST_F(ExplainerTest, StillRetryingIsPending) {
  agent_.records["c5"] = Record("c5", v1::RETRYABLE_FAILED);
  v1::Journey j = Run("c5");
  EXPECT_EQ(j.verdict(), v1::VERDICT_PENDING);
}

TEST_F(ExplainerTest, FollowUpNotYetAppliedIsPendingThenAgrees) {
  agent_.records["t1"] = Record("t1", v1::ACKED);
  const std::string credit = Inbox::FollowUpCommandId("acme", "t1", 0);
  agent_.records[credit] = Record(credit, v1::SENDING);
  s0_.effects = {Effect("t1", 4, 1'100)};
  v1::Journey pending = Run("t1");
  EXPECT_EQ(pending.verdict(), v1::VERDICT_PENDING);
  EXPECT_FALSE(pending.books_agree());
  s1_.effects = {Effect(credit, 9, 1'400)};
  v1::Journey done = Run("t1");
  EXPECT_EQ(done.verdict(), v1::VERDICT_APPLIED_ONCE);
  ASSERT_EQ(done.follow_ups_size(), 1);
  EXPECT_EQ(done.follow_ups(0).where(), "s1");
  EXPECT_TRUE(done.books_agree());
}

TEST_F(ExplainerTest, AComponentDownGivesAPartialJourney) {
  agent_.records["c1"] = Record("c1", v1::ACKED);
  s0_.audit = {Audit("c1", "committed", 1'200)};
  s0_.effects = {Effect("c1", 7, 1'100)};
  s1_.down = absl::UnavailableError("connection refused");
  v1::Journey j = Run("c1");
  EXPECT_EQ(j.verdict(), v1::VERDICT_APPLIED_ONCE);
  EXPECT_FALSE(j.books_agree());  // s1's effects are unknown
  ASSERT_EQ(j.unread_size(), 3);  // its audit, parked records and effects
  EXPECT_NE(j.unread(0).find("s1: UNAVAILABLE"), std::string::npos) << j.unread(0);
}

TEST_F(ExplainerTest, NothingAnywhereIsNotFound) {
  EXPECT_EQ(Run("nobody").verdict(), v1::VERDICT_NOT_FOUND);
}

TEST_F(ExplainerTest, MalformedQueriesAreRefused) {
  ExplainOptions options;
  for (const std::string& bad : {std::string(), std::string(300, 'x'), std::string("a\nb")}) {
    auto j = Explain(bad, options, {&agent_}, {&s0_});
    EXPECT_EQ(j.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace eonce::explain
