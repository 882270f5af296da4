// W3C trace context (https://www.w3.org/TR/trace-context/): the `traceparent` and
// `tracestate` a command carries from its producer, across the durable outbox and every
// retry, to the business.
//
// Trace context is never part of a command's identity: the payload hash, the idempotency
// key and every duplicate or conflict decision ignore it. A malformed traceparent is
// dropped (with the tracestate that belongs to it), never refused: tracing must not turn
// a good command away. Each component counts what it dropped in its metrics.
//
// Version 00 is "00-<32 hex trace-id>-<16 hex parent-id>-<2 hex flags>", lowercase hex,
// neither id all zeros. A higher version is read by its first four fields (a longer
// value must go on with '-'); version ff is invalid. What is kept is always written back
// as version 00, at most kMaxTraceparentBytes. Stateless functions, thread-safe.
#ifndef EONCE_COMMON_COMMAND_TRACE_CONTEXT_H_
#define EONCE_COMMON_COMMAND_TRACE_CONTEXT_H_

#include <cstddef>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "common/base/log.h"
#include "common/base/random.h"
#include "eonce/v1/command.pb.h"

namespace eonce {

// The gRPC metadata names, as the W3C and every mesh spell them.
inline constexpr char kTraceparentHeader[] = "traceparent";
inline constexpr char kTracestateHeader[] = "tracestate";

// A version-00 traceparent is exactly this long.
inline constexpr size_t kMaxTraceparentBytes = 55;
// A traceparent of a later version may carry more fields; longer than this is not read.
inline constexpr size_t kMaxFutureTraceparentBytes = 256;
// The spec's bounds on tracestate: propagate at least 512 bytes and 32 list members;
// ours are also the most we keep.
inline constexpr size_t kMaxTracestateBytes = 512;
inline constexpr int kMaxTracestateMembers = 32;

struct Traceparent {
  std::string trace_id;   // 32 lowercase hex, not all zeros
  std::string parent_id;  // 16 lowercase hex, not all zeros
  std::string flags;      // 2 lowercase hex
};

// The parsed value, or nullopt when `value` is not a valid traceparent.
std::optional<Traceparent> ParseTraceparent(absl::string_view value);

// "00-<trace id>-<parent id>-<flags>".
std::string FormatTraceparent(const Traceparent& traceparent);

// True when `value` is a tracestate the spec allows, within our bounds (empty is valid).
bool ValidTracestate(absl::string_view value);

// A fresh span id: 16 lowercase hex digits from `random`, never all zeros.
std::string NewSpanId(Random& random);

// What SanitizeTrace did to a trace context.
struct TraceDrops {
  bool traceparent = false;  // a malformed traceparent was dropped (with its tracestate)
  bool tracestate = false;   // a malformed or oversized tracestate was dropped alone
};

// Keeps what is valid of `trace`, with the traceparent rewritten as version 00; clears
// the rest. A tracestate without a traceparent is meaningless and is cleared unnoted.
TraceDrops SanitizeTrace(v1::TraceContext* trace);

// The trace id of a (sanitized) trace context; empty when it has none.
std::string TraceIdOf(const v1::TraceContext& trace);
// The parent (span) id of a (sanitized) trace context; empty when it has none.
std::string SpanIdOf(const v1::TraceContext& trace);

// True when `trace`'s flags have the W3C "sampled" bit: its caller records this trace.
// Components then log a traced command's ordinary steps too (otherwise only its
// troubles), so that its path can be followed without logging every command.
bool Sampled(const v1::TraceContext& trace);

// `trace` as a child span `span_id` of itself: same trace id and flags, tracestate kept.
// Empty when `trace` holds no valid traceparent.
v1::TraceContext ChildTrace(const v1::TraceContext& trace, const std::string& span_id);

// Adds {"trace_id", ...} to `fields` when `trace` has one: every log line about a
// command carries its trace id, so that a collector can join them.
void AddTraceField(const v1::TraceContext& trace, LogFields* fields);
LogFields WithTrace(LogFields fields, const v1::TraceContext& trace);

// An ordinary step of a command (applied, acked): logged at info, with its trace id and
// span id, only when its trace is Sampled. Other commands log only their troubles.
void LogSampledStep(absl::string_view message, LogFields fields, const v1::TraceContext& trace);

}  // namespace eonce

#endif  // EONCE_COMMON_COMMAND_TRACE_CONTEXT_H_
