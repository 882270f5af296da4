// FaultProxy: a userspace TCP proxy that puts network faults on one hop of a test.
//
// It listens on 127.0.0.1 (a port of its own) and forwards every connection to
// `upstream`. Its faults can be switched at any time:
//   - blackhole: nothing moves either way and new connections are not carried on; the
//     bytes wait in the kernel's buffers, as in a partition that TCP rides out. Calls
//     time out; once healed, whatever was waiting flows again.
//   - delay: every chunk waits this long before it is forwarded.
//   - lose responses: with this probability, when the server starts answering a request
//     (an HTTP/2 HEADERS frame on a request stream), the proxy resets both connections
//     instead of passing the answer on. The request reached the server and may have
//     been applied; the caller learns nothing: the "response lost" failure.
// Connections, threads and buffers are bounded.
#ifndef EONCE_TESTS_UTIL_FAULT_PROXY_H_
#define EONCE_TESTS_UTIL_FAULT_PROXY_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace eonce::testing {

class FaultProxy {
 public:
  // `upstream`: "127.0.0.1:PORT". The proxy's own dice use `seed`.
  static absl::StatusOr<std::unique_ptr<FaultProxy>> Start(const std::string& upstream,
                                                           uint64_t seed);
  ~FaultProxy();

  std::string address() const;

  void SetBlackhole(bool on) { blackhole_.store(on); }
  void SetDelayMs(int ms) { delay_ms_.store(ms); }
  void SetLoseResponseRatio(double ratio) { lose_ppm_.store(static_cast<int>(ratio * 1e6)); }
  // Every fault off.
  void Heal();

  int64_t connections() const { return connections_.load(); }
  int64_t responses_lost() const { return responses_lost_.load(); }

 private:
  FaultProxy() = default;
  void AcceptLoop();
  void Serve(int client);
  bool RollLoss();

  static constexpr int kMaxConnections = 256;

  std::string upstream_host_;
  int upstream_port_ = 0;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<bool> blackhole_{false};
  std::atomic<int> delay_ms_{0};
  std::atomic<int> lose_ppm_{0};
  std::atomic<int64_t> connections_{0};
  std::atomic<int64_t> responses_lost_{0};
  std::atomic<int> open_{0};
  absl::Mutex mu_;
  uint64_t rng_state_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<int> fds_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
  std::thread acceptor_;
};

}  // namespace eonce::testing

#endif  // EONCE_TESTS_UTIL_FAULT_PROXY_H_
