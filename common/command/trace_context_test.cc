// The W3C trace-context rules the components share: the spec's valid and invalid
// traceparents, tracestate bounds, span ids from the injected randomness.
#include "common/command/trace_context.h"

#include <set>
#include <string>

#include "common/base/random.h"
#include "gtest/gtest.h"

namespace eonce {
namespace {

constexpr char kValid[] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

TEST(TraceContextTest, ParsesTheSpecExample) {
  auto parsed = ParseTraceparent(kValid);
  ASSERT_TRUE(parsed.has_value());
  EXPECT_EQ(parsed->trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(parsed->parent_id, "00f067aa0ba902b7");
  EXPECT_EQ(parsed->flags, "01");
  EXPECT_EQ(FormatTraceparent(*parsed), kValid);
}

TEST(TraceContextTest, RefusesWhatTheSpecCallsInvalid) {
  const std::string bad[] = {
      "",
      "00",
      // uppercase hex
      "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00F067AA0BA902B7-01",
      // all-zero trace id, all-zero parent id
      "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
      "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
      // version ff
      "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
      // version 00 with anything after the flags
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
      // short fields, wrong separators, non-hex
      "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
      "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
      "00-4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7-01",
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7_01",
      "0g-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
      "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",
      // a later version whose extra part does not start with '-'
      "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
      // longer than anything we read
      "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-" + std::string(300, 'a'),
  };
  for (const std::string& value : bad) {
    EXPECT_FALSE(ParseTraceparent(value).has_value()) << value;
  }
}

TEST(TraceContextTest, ReadsALaterVersionByItsFirstFourFields) {
  auto longer = ParseTraceparent(
      "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-the-future-holds");
  ASSERT_TRUE(longer.has_value());
  EXPECT_EQ(longer->trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(FormatTraceparent(*longer), kValid);  // written back as version 00
  EXPECT_TRUE(
      ParseTraceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09").has_value());
}

TEST(TraceContextTest, TracestateBounds) {
  EXPECT_TRUE(ValidTracestate(""));
  EXPECT_TRUE(ValidTracestate("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"));
  EXPECT_TRUE(ValidTracestate("fw529a3039@dt=abc , ,vendor_x-1/*=v"));
  EXPECT_FALSE(ValidTracestate("Rojo=1"));         // keys are lowercase
  EXPECT_FALSE(ValidTracestate("rojo"));           // no value
  EXPECT_FALSE(ValidTracestate("rojo=a=b"));       // '=' in a value
  EXPECT_FALSE(ValidTracestate("rojo=a\tb"));      // a control character
  EXPECT_FALSE(ValidTracestate("a@=1"));           // empty system id
  std::string members;
  for (int i = 0; i < 32; ++i) members += "k" + std::to_string(i) + "=v,";
  EXPECT_TRUE(ValidTracestate(members));
  EXPECT_FALSE(ValidTracestate(members + "k32=v"));  // 33 members
  EXPECT_FALSE(ValidTracestate("k=" + std::string(511, 'v')));  // 513 bytes
}

TEST(TraceContextTest, SanitizeKeepsTheValidAndDropsTheRest) {
  v1::TraceContext trace;
  trace.set_traceparent("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x");
  trace.set_tracestate("rojo=1");
  TraceDrops drops = SanitizeTrace(&trace);
  EXPECT_FALSE(drops.traceparent);
  EXPECT_FALSE(drops.tracestate);
  EXPECT_EQ(trace.traceparent(), kValid);
  EXPECT_EQ(trace.tracestate(), "rojo=1");

  trace.set_tracestate("BAD");
  drops = SanitizeTrace(&trace);
  EXPECT_TRUE(drops.tracestate);
  EXPECT_EQ(trace.traceparent(), kValid);
  EXPECT_EQ(trace.tracestate(), "");

  trace.set_traceparent("00-not-a-trace");
  trace.set_tracestate("rojo=1");
  drops = SanitizeTrace(&trace);
  EXPECT_TRUE(drops.traceparent);
  EXPECT_EQ(trace.ByteSizeLong(), 0u);  // its tracestate goes with it

  v1::TraceContext none;
  none.set_tracestate("rojo=1");
  drops = SanitizeTrace(&none);
  EXPECT_FALSE(drops.traceparent);
  EXPECT_EQ(none.ByteSizeLong(), 0u);
}

TEST(TraceContextTest, ChildSpansKeepTheTraceAndFlagsWithFreshIdsFromTheInjectedRandom) {
  v1::TraceContext trace;
  trace.set_traceparent(kValid);
  trace.set_tracestate("rojo=1");
  SeededRandom random(7);
  std::set<std::string> spans;
  for (int i = 0; i < 100; ++i) {
    std::string span = NewSpanId(random);
    ASSERT_EQ(span.size(), 16u);
    v1::TraceContext child = ChildTrace(trace, span);
    auto parsed = ParseTraceparent(child.traceparent());
    ASSERT_TRUE(parsed.has_value()) << child.traceparent();
    EXPECT_EQ(parsed->trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
    EXPECT_EQ(parsed->flags, "01");
    EXPECT_EQ(parsed->parent_id, span);
    EXPECT_EQ(child.tracestate(), "rojo=1");
    spans.insert(span);
  }
  EXPECT_EQ(spans.size(), 100u);
  SeededRandom first(11), second(11);
  EXPECT_EQ(NewSpanId(first), NewSpanId(second));  // same seed, same ids
  EXPECT_EQ(ChildTrace(v1::TraceContext(), "00f067aa0ba902b7").ByteSizeLong(), 0u);
}

TEST(TraceContextTest, SampledIsTheLowFlagBit) {
  v1::TraceContext trace;
  EXPECT_FALSE(Sampled(trace));
  trace.set_traceparent(kValid);
  EXPECT_TRUE(Sampled(trace));
  trace.set_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00");
  EXPECT_FALSE(Sampled(trace));
  trace.set_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0b");
  EXPECT_TRUE(Sampled(trace));
}

TEST(TraceContextTest, LogFieldOnlyWhenThereIsATrace) {
  v1::TraceContext trace;
  EXPECT_TRUE(WithTrace({}, trace).empty());
  trace.set_traceparent(kValid);
  LogFields fields = WithTrace({{"command_id", "c"}}, trace);
  ASSERT_EQ(fields.size(), 2u);
  EXPECT_EQ(fields[1].first, "trace_id");
  EXPECT_EQ(fields[1].second, "4bf92f3577b34da6a3ce929d0e0e4736");
}

}  // namespace
}  // namespace eonce
