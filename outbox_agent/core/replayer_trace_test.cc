// Trace context across the outbox: kept durably with the command, sent on every attempt as
// a fresh child span of the producer's, recorded in the history, and never part of the
// command's identity (a duplicate with another traceparent is still a duplicate).
#include <set>
#include <string>
#include <vector>

#include "common/command/command.h"
#include "common/command/trace_context.h"
#include "outbox_agent/core/replayer_test_fixture.h"

namespace eonce {
namespace {

constexpr char kTraceId[] = "4bf92f3577b34da6a3ce929d0e0e4736";
constexpr char kTraceparent[] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

class ReplayerTraceTest : public ReplayerTest {
 protected:
  v1::Command Traced(const std::string& id, const std::string& traceparent,
                     const std::string& request = "pay 10") {
    v1::Command c;
    c.set_command_id(id);
    c.set_target_method("/eonce.ledger.v1.Ledger/Transfer");
    c.set_request(request);
    c.mutable_entity()->set_type("account");
    c.mutable_entity()->set_id("alice");
    c.mutable_trace()->set_traceparent(traceparent);
    c.mutable_trace()->set_tracestate("rojo=00f067aa0ba902b7");
    return c;
  }
};

TEST_F(ReplayerTraceTest, EachAttemptIsAFreshChildSpanOfTheDurableTrace) {
  ASSERT_TRUE(outbox_->Enqueue(Traced("c1", kTraceparent)).ok());
  Open();  // a crash: the trace was synced with the command
  sidecar_.AnswerSubmit(Fail(absl::StatusCode::kDeadlineExceeded, nullptr));  // answer lost
  replayer_->Pump();
  ASSERT_EQ(StateOf("c1"), v1::UNKNOWN);
  clock_.AdvanceMs(options_.retry.max_backoff_ms);
  replayer_->Pump();  // reconciled (NOT_SEEN), then sent again, and applied
  OutboxRecord r = Get("c1");
  ASSERT_EQ(r.state(), v1::ACKED);
  EXPECT_EQ(r.command().trace().traceparent(), kTraceparent);  // the producer's, as stored

  // Attempt 1 sent, attempt 2 reconciled and sent under one span.
  std::vector<v1::TraceContext> sent = sidecar_.submitted_traces();
  ASSERT_EQ(sent.size(), 2u);
  ASSERT_EQ(sidecar_.reconciled_traces().size(), 1u);
  EXPECT_EQ(sidecar_.reconciled_traces()[0].traceparent(), sent[1].traceparent());
  std::set<std::string> spans;
  for (const v1::TraceContext& t : sent) {
    auto parsed = ParseTraceparent(t.traceparent());
    ASSERT_TRUE(parsed.has_value()) << t.traceparent();
    EXPECT_EQ(parsed->trace_id, kTraceId);
    EXPECT_EQ(parsed->flags, "01");
    EXPECT_NE(parsed->parent_id, "00f067aa0ba902b7");
    EXPECT_EQ(t.tracestate(), "rojo=00f067aa0ba902b7");
    spans.insert(parsed->parent_id);
  }
  EXPECT_EQ(spans.size(), 2u);
  // The history names each attempt's span, on the transition that claimed it.
  std::vector<std::string> in_history;
  for (const v1::Transition& t : r.history()) {
    if (!t.span_id().empty()) in_history.push_back(t.span_id());
  }
  EXPECT_EQ(in_history, (std::vector<std::string>{SpanIdOf(sent[0]), SpanIdOf(sent[1])}));
  EXPECT_EQ(r.attempt_span_id(), SpanIdOf(sent[1]));
}

TEST_F(ReplayerTraceTest, ACommandWithoutATraceGetsNone) {
  Enqueue("c1", "a");
  replayer_->Pump();
  EXPECT_EQ(StateOf("c1"), v1::ACKED);
  ASSERT_EQ(sidecar_.submitted_traces().size(), 1u);
  EXPECT_EQ(sidecar_.submitted_traces()[0].ByteSizeLong(), 0u);
  OutboxRecord r = Get("c1");
  for (const v1::Transition& t : r.history()) EXPECT_EQ(t.span_id(), "");
}

TEST_F(ReplayerTraceTest, TraceContextIsNotPartOfTheCommandsIdentity) {
  auto first = outbox_->Enqueue(Traced("c1", kTraceparent));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(first->created());
  // The same command retried under another trace: a duplicate, answered with the record
  // as first stored.
  auto again =
      outbox_->Enqueue(Traced("c1", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(again->created());
  EXPECT_EQ(again->record().command().trace().traceparent(), kTraceparent);
  // And with no trace at all.
  v1::Command untraced = Traced("c1", "");
  untraced.clear_trace();
  auto bare = outbox_->Enqueue(untraced);
  ASSERT_TRUE(bare.ok()) << bare.status();
  EXPECT_FALSE(bare->created());
  // Another payload under the same id is still a conflict, trace or not.
  auto other = outbox_->Enqueue(Traced("c1", kTraceparent, "pay 20"));
  EXPECT_EQ(other.status().code(), absl::StatusCode::kAlreadyExists);
  // The hash and the derived key ignore it.
  v1::Command a = Traced("c2", kTraceparent), b = untraced;
  b.set_command_id("c2");
  FillPayloadHash(&a);
  FillPayloadHash(&b);
  EXPECT_EQ(a.payload_hash().sha256(), b.payload_hash().sha256());
  EXPECT_EQ(DeriveIdempotencyKey(a), DeriveIdempotencyKey(b));
  replayer_->Pump();
  EXPECT_EQ(sidecar_.submitted(), std::vector<std::string>{"c1"});
}

TEST_F(ReplayerTraceTest, AMalformedTraceparentIsDroppedAndCountedNeverRefused) {
  auto enqueued = outbox_->Enqueue(Traced("c1", "00-NOT-A-TRACE"));
  ASSERT_TRUE(enqueued.ok()) << enqueued.status();
  EXPECT_TRUE(enqueued->created());
  EXPECT_EQ(enqueued->record().command().trace().ByteSizeLong(), 0u);
  EXPECT_EQ(outbox_->traceparents_dropped(), 1);
  v1::Command bad_state = Traced("c2", kTraceparent);
  bad_state.mutable_trace()->set_tracestate("NOT VALID");
  auto kept = outbox_->Enqueue(bad_state);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(kept->record().command().trace().traceparent(), kTraceparent);
  EXPECT_EQ(kept->record().command().trace().tracestate(), "");
  EXPECT_EQ(outbox_->tracestates_dropped(), 1);
  replayer_->Pump();
  EXPECT_EQ(StateOf("c1"), v1::ACKED);
}

}  // namespace
}  // namespace eonce
