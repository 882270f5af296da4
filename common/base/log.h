// Structured logs: one JSON object per line on stderr.
//
// Fields are ids and outcomes (command id, key, tenant, operation, status). Callers never
// pass payloads or secrets; there is no field for them. Thread-safe: each line is written
// with a single call.
#ifndef EONCE_COMMON_BASE_LOG_H_
#define EONCE_COMMON_BASE_LOG_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace eonce {

using LogFields = std::vector<std::pair<absl::string_view, std::string>>;

void Log(absl::string_view level, absl::string_view message, const LogFields& fields = {});

inline void LogInfo(absl::string_view message, const LogFields& fields = {}) {
  Log("info", message, fields);
}
inline void LogWarn(absl::string_view message, const LogFields& fields = {}) {
  Log("warn", message, fields);
}
inline void LogError(absl::string_view message, const LogFields& fields = {}) {
  Log("error", message, fields);
}

// Turns every log line off (the simulation runs thousands of crashes a second).
void SetLogsEnabled(bool enabled);

// The JSON line Log would write, without the time; for tests.
std::string FormatLogLine(absl::string_view level, absl::string_view message,
                          const LogFields& fields);

}  // namespace eonce

#endif  // EONCE_COMMON_BASE_LOG_H_
