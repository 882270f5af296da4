#include "tools/explain/render.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "google/protobuf/util/json_util.h"

namespace eonce::explain {
namespace {

std::string When(int64_t at_ms) {
  if (at_ms <= 0) return std::string(23, '?');
  return absl::FormatTime("%Y-%m-%d %H:%M:%E3S", absl::FromUnixMillis(at_ms), absl::UTCTimeZone());
}

}  // namespace

std::string RenderText(const v1::Journey& j) {
  std::string out = absl::StrCat("command ", j.command_id(), "  key ", j.idempotency_key(), "\n");
  absl::StrAppend(&out, "  tenant ", j.tenant(), ", entity ", j.entity().empty() ? "?" : j.entity(),
                  ", ", j.target_method().empty() ? "?" : j.target_method(), "\n");
  size_t source_width = 0;
  for (const v1::JourneyEvent& e : j.events()) source_width = std::max(source_width, e.source().size());
  for (const v1::JourneyEvent& e : j.events()) {
    absl::StrAppend(&out, When(e.at_ms()), "  ",
                    absl::StrFormat("%-*s  %-19s", static_cast<int>(source_width), e.source(),
                                    e.kind()),
                    " ", e.command_id() == j.command_id() ? "" : absl::StrCat("[", e.command_id(), "] "),
                    e.detail(), e.trace_id().empty() ? "" : absl::StrCat("  trace ", e.trace_id()),
                    "\n");
  }
  absl::StrAppend(&out, "effects: ", j.effects(), j.effects_read() ? "" : " found (not all read)");
  if (j.effects() > 0) absl::StrAppend(&out, " (seq ", j.effect_seq(), ")");
  for (const v1::JourneyFollowUp& f : j.follow_ups()) {
    absl::StrAppend(&out, "; follow-up ", f.command_id(), ": ", f.effects(), " effect",
                    f.effects() == 1 ? "" : "s", f.where().empty() ? "" : " at ", f.where());
  }
  absl::StrAppend(&out, j.books_agree() ? "; the books agree" : "", "\n");
  for (const std::string& u : j.unread()) absl::StrAppend(&out, "could not read ", u, "\n");
  absl::StrAppend(&out, "verdict: ", j.verdict_text(), "\n");
  return out;
}

std::string RenderJson(const v1::Journey& j) {
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string json;
  (void)google::protobuf::util::MessageToJsonString(j, &json, options);
  return json + "\n";
}

}  // namespace eonce::explain
