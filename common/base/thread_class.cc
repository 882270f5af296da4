#include "common/base/thread_class.h"

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

#ifdef __linux__
#include <sched.h>
#endif

namespace eonce {

absl::Status AsBatchThread() {
#ifdef __linux__
  sched_param param{};
  param.sched_priority = 0;
  // On Linux a pid of 0 names the calling thread, not the process.
  if (sched_setscheduler(0, SCHED_BATCH, &param) != 0) {
    return absl::InternalError(
        absl::StrCat("sched_setscheduler(SCHED_BATCH): ", std::strerror(errno)));
  }
  return absl::OkStatus();
#else
  return absl::FailedPreconditionError("no batch scheduling class on this platform");
#endif
}

bool IsBatchThread() {
#ifdef __linux__
  return sched_getscheduler(0) == SCHED_BATCH;
#else
  return false;
#endif
}

}  // namespace eonce
