#include "common/command/trace_context.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace eonce {
namespace {

bool LowerHex(absl::string_view s) {
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

bool AllZeros(absl::string_view s) { return s.find_first_not_of('0') == absl::string_view::npos; }

bool KeyChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '*' ||
         c == '/';
}

// key = simple-key / multi-tenant-key (tenant-id "@" system-id), each lowercase, at most
// 256 (tenant 241, system 14) characters, starting with a letter or (multi-tenant) a digit.
bool ValidKey(absl::string_view key) {
  size_t at = key.find('@');
  if (at == absl::string_view::npos) {
    if (key.empty() || key.size() > 256 || !(key[0] >= 'a' && key[0] <= 'z')) return false;
    for (char c : key) {
      if (!KeyChar(c)) return false;
    }
    return true;
  }
  absl::string_view tenant = key.substr(0, at);
  absl::string_view system = key.substr(at + 1);
  if (tenant.empty() || tenant.size() > 241 || system.empty() || system.size() > 14) return false;
  if (!((tenant[0] >= 'a' && tenant[0] <= 'z') || (tenant[0] >= '0' && tenant[0] <= '9'))) {
    return false;
  }
  if (!(system[0] >= 'a' && system[0] <= 'z')) return false;
  for (char c : tenant) {
    if (!KeyChar(c)) return false;
  }
  for (char c : system) {
    if (!KeyChar(c)) return false;
  }
  return true;
}

// value = 0*255(chr) nblk-chr; chr = 0x20-0x7E except "," and "=".
bool ValidValue(absl::string_view value) {
  if (value.empty() || value.size() > 256 || value.back() == ' ') return false;
  for (char c : value) {
    if (c < 0x20 || c > 0x7e || c == ',' || c == '=') return false;
  }
  return true;
}

absl::string_view TrimOws(absl::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

std::optional<Traceparent> ParseTraceparent(absl::string_view value) {
  if (value.size() < kMaxTraceparentBytes || value.size() > kMaxFutureTraceparentBytes) {
    return std::nullopt;
  }
  absl::string_view version = value.substr(0, 2);
  if (!LowerHex(version) || version == "ff") return std::nullopt;
  // Version 00 is exactly 55 characters; a later one may go on, after a '-'.
  if (version == "00" ? value.size() != kMaxTraceparentBytes
                      : value.size() > kMaxTraceparentBytes && value[55] != '-') {
    return std::nullopt;
  }
  if (value[2] != '-' || value[35] != '-' || value[52] != '-') return std::nullopt;
  Traceparent parsed;
  absl::string_view trace_id = value.substr(3, 32);
  absl::string_view parent_id = value.substr(36, 16);
  absl::string_view flags = value.substr(53, 2);
  if (!LowerHex(trace_id) || !LowerHex(parent_id) || !LowerHex(flags)) return std::nullopt;
  if (AllZeros(trace_id) || AllZeros(parent_id)) return std::nullopt;
  parsed.trace_id = std::string(trace_id);
  parsed.parent_id = std::string(parent_id);
  parsed.flags = std::string(flags);
  return parsed;
}

std::string FormatTraceparent(const Traceparent& traceparent) {
  return absl::StrCat("00-", traceparent.trace_id, "-", traceparent.parent_id, "-",
                      traceparent.flags);
}

bool ValidTracestate(absl::string_view value) {
  if (value.size() > kMaxTracestateBytes) return false;
  int members = 0;
  for (absl::string_view member : absl::StrSplit(value, ',')) {
    member = TrimOws(member);
    if (member.empty()) continue;  // the spec allows empty list members
    if (++members > kMaxTracestateMembers) return false;
    size_t eq = member.find('=');
    if (eq == absl::string_view::npos) return false;
    if (!ValidKey(member.substr(0, eq)) || !ValidValue(member.substr(eq + 1))) return false;
  }
  return true;
}

std::string NewSpanId(Random& random) {
  uint64_t bits = 0;
  while (bits == 0) bits = random.Next();
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id(16, '0');
  for (int i = 15; i >= 0; --i, bits >>= 4) id[i] = kHex[bits & 0xf];
  return id;
}

TraceDrops SanitizeTrace(v1::TraceContext* trace) {
  TraceDrops drops;
  if (trace->traceparent().empty()) {
    trace->Clear();
    return drops;
  }
  std::optional<Traceparent> parsed = ParseTraceparent(trace->traceparent());
  if (!parsed.has_value()) {
    drops.traceparent = true;
    trace->Clear();
    return drops;
  }
  trace->set_traceparent(FormatTraceparent(*parsed));
  if (!ValidTracestate(trace->tracestate())) {
    drops.tracestate = true;
    trace->clear_tracestate();
  }
  return drops;
}

std::string TraceIdOf(const v1::TraceContext& trace) {
  std::optional<Traceparent> parsed = ParseTraceparent(trace.traceparent());
  return parsed.has_value() ? parsed->trace_id : std::string();
}

std::string SpanIdOf(const v1::TraceContext& trace) {
  std::optional<Traceparent> parsed = ParseTraceparent(trace.traceparent());
  return parsed.has_value() ? parsed->parent_id : std::string();
}

bool Sampled(const v1::TraceContext& trace) {
  std::optional<Traceparent> parsed = ParseTraceparent(trace.traceparent());
  if (!parsed.has_value()) return false;
  const char low = parsed->flags[1];
  const int bits = low <= '9' ? low - '0' : low - 'a' + 10;
  return (bits & 1) != 0;
}

v1::TraceContext ChildTrace(const v1::TraceContext& trace, const std::string& span_id) {
  v1::TraceContext child;
  std::optional<Traceparent> parsed = ParseTraceparent(trace.traceparent());
  if (!parsed.has_value()) return child;
  parsed->parent_id = span_id;
  child.set_traceparent(FormatTraceparent(*parsed));
  child.set_tracestate(trace.tracestate());
  return child;
}

void AddTraceField(const v1::TraceContext& trace, LogFields* fields) {
  std::string trace_id = TraceIdOf(trace);
  if (!trace_id.empty()) fields->emplace_back("trace_id", std::move(trace_id));
}

LogFields WithTrace(LogFields fields, const v1::TraceContext& trace) {
  AddTraceField(trace, &fields);
  return fields;
}

void LogSampledStep(absl::string_view message, LogFields fields, const v1::TraceContext& trace) {
  std::optional<Traceparent> parsed = ParseTraceparent(trace.traceparent());
  if (!parsed.has_value() || !Sampled(trace)) return;
  fields.emplace_back("trace_id", parsed->trace_id);
  fields.emplace_back("span_id", parsed->parent_id);
  LogInfo(message, fields);
}

}  // namespace eonce
