#include "tests/util/process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace eonce {

namespace {

// In a forked child: `binary` with `args`, its stdout and stderr on the descriptors given,
// the signals the parent blocks unblocked (children must not inherit the demo's blocked
// signals). Never returns.
[[noreturn]] void ExecChild(const std::string& binary, const std::vector<std::string>& args,
                            int stdout_fd, int stderr_fd) {
  dup2(stdout_fd, STDOUT_FILENO);
  dup2(stderr_fd, STDERR_FILENO);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(binary.c_str()));
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  execv(binary.c_str(), argv.data());
  _exit(127);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Process>> Process::Start(const std::string& binary,
                                                       const std::vector<std::string>& args,
                                                       const std::string& log_path,
                                                       int64_t timeout_ms) {
  int out[2];
  if (pipe(out) != 0) return absl::InternalError("pipe failed");
  int log = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log < 0) return absl::InternalError(absl::StrCat("cannot open ", log_path));
  pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    close(out[0]);
    ExecChild(binary, args, out[1], log);
  }
  close(out[1]);
  close(log);
  std::unique_ptr<Process> process(new Process());
  process->pid_ = pid;
  process->stdout_fd_ = out[0];

  std::string line;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd fd{out[0], POLLIN, 0};
    if (poll(&fd, 1, 100) <= 0) continue;
    char c;
    ssize_t n = read(out[0], &c, 1);
    if (n <= 0) break;  // the child exited
    if (c != '\n') {
      line.push_back(c);
      continue;
    }
    size_t at = line.find(" listening on ");
    if (at != std::string::npos) {
      process->address_ = line.substr(at + strlen(" listening on "));
      return process;
    }
    line.clear();
  }
  process->Signal(SIGKILL, true);
  return absl::UnavailableError(
      absl::StrCat(binary, " did not start; see ", log_path));
}

absl::StatusOr<std::unique_ptr<Process>> Process::Spawn(const std::string& binary,
                                                       const std::vector<std::string>& args,
                                                       const std::string& log_path) {
  int log = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log < 0) return absl::InternalError(absl::StrCat("cannot open ", log_path));
  pid_t pid = fork();
  if (pid < 0) {
    close(log);
    return absl::InternalError("fork failed");
  }
  if (pid == 0) ExecChild(binary, args, log, log);
  close(log);
  std::unique_ptr<Process> process(new Process());
  process->pid_ = pid;
  return process;
}

absl::StatusOr<int> Process::RunToExit(const std::string& binary,
                                       const std::vector<std::string>& args,
                                       const std::string& log_path, int64_t timeout_ms) {
  int log = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log < 0) return absl::InternalError(absl::StrCat("cannot open ", log_path));
  pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) ExecChild(binary, args, open("/dev/null", O_WRONLY), log);
  close(log);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() >= deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return absl::DeadlineExceededError(absl::StrCat(binary, " still ran; see ", log_path));
    }
    // A child that refuses to start exits at once; this is a poll, not a timing.
    poll(nullptr, 0, 20);
  }
  if (!WIFEXITED(status)) {
    return absl::InternalError(absl::StrCat(binary, " ended by a signal; see ", log_path));
  }
  return WEXITSTATUS(status);
}

int Process::Signal(int signal, bool wait) {
  if (pid_ <= 0) return -1;
  kill(pid_, signal);
  if (!wait) return 0;
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
  return status;
}

bool Process::Running() {
  if (pid_ <= 0) return false;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) == pid_) {
    pid_ = -1;
    return false;
  }
  return true;
}

Process::~Process() {
  if (pid_ > 0) Signal(SIGKILL, true);
  if (stdout_fd_ >= 0) close(stdout_fd_);
}

}  // namespace eonce
