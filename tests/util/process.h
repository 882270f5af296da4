// Process: a child server process for the process-level tests, the demo and the benchmarks.
//
// Start runs the binary with its stderr (the JSON logs) going to a file, and waits for
// the "NAME listening on HOST:PORT" line on its stdout, so callers learn the bound port.
#ifndef EONCE_TESTS_UTIL_PROCESS_H_
#define EONCE_TESTS_UTIL_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace eonce {

class Process {
 public:
  static absl::StatusOr<std::unique_ptr<Process>> Start(const std::string& binary,
                                                       const std::vector<std::string>& args,
                                                       const std::string& log_path,
                                                       int64_t timeout_ms = 20'000);
  // Starts the binary with its stdout and stderr both going to `log_path`, without waiting
  // for anything (for a server that prints no "listening on" line; the caller checks
  // readiness its own way).
  static absl::StatusOr<std::unique_ptr<Process>> Spawn(const std::string& binary,
                                                       const std::vector<std::string>& args,
                                                       const std::string& log_path);
  // Runs the binary to its end (a program that refuses to start): its exit code, its
  // stderr appended to `log_path`. DEADLINE_EXCEEDED (and the child killed) if it still
  // runs after `timeout_ms`.
  static absl::StatusOr<int> RunToExit(const std::string& binary,
                                       const std::vector<std::string>& args,
                                       const std::string& log_path, int64_t timeout_ms = 20'000);
  ~Process();

  const std::string& address() const { return address_; }
  pid_t pid() const { return pid_; }
  // Sends `signal`; with `wait`, reaps the process and returns its exit status.
  int Signal(int signal, bool wait);
  bool Running();

 private:
  Process() = default;
  pid_t pid_ = -1;
  int stdout_fd_ = -1;
  std::string address_;
};

}  // namespace eonce

#endif  // EONCE_TESTS_UTIL_PROCESS_H_
