#include "common/base/log.h"

#include <atomic>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace eonce {
namespace {

std::atomic<bool> logs_enabled{true};

void AppendJsonString(std::string* out, absl::string_view value) {
  out->push_back('"');
  for (char c : value) {
    switch (c) {
      case '"': out->append("\\\""); break;
      case '\\': out->append("\\\\"); break;
      case '\n': out->append("\\n"); break;
      case '\r': out->append("\\r"); break;
      case '\t': out->append("\\t"); break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          absl::StrAppendFormat(out, "\\u%04x", static_cast<unsigned char>(c));
        } else {
          out->push_back(c);
        }
    }
  }
  out->push_back('"');
}

}  // namespace

std::string FormatLogLine(absl::string_view level, absl::string_view message,
                          const LogFields& fields) {
  std::string line = "{\"level\":";
  AppendJsonString(&line, level);
  line.append(",\"msg\":");
  AppendJsonString(&line, message);
  for (const auto& [key, value] : fields) {
    line.push_back(',');
    AppendJsonString(&line, key);
    line.push_back(':');
    AppendJsonString(&line, value);
  }
  line.push_back('}');
  return line;
}

void SetLogsEnabled(bool enabled) { logs_enabled = enabled; }

void Log(absl::string_view level, absl::string_view message, const LogFields& fields) {
  if (!logs_enabled.load(std::memory_order_relaxed)) return;
  // The log's own timestamp is the one place outside RealClock that reads the wall clock:
  // it is for humans and never feeds a decision.
  std::string line = absl::StrCat(
      "{\"ts\":\"", absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone()),
      "\",", FormatLogLine(level, message, fields).substr(1), "\n");
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace eonce
