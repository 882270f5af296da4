#include "tests/util/fault_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace eonce::testing {
namespace {

constexpr size_t kMaxBuffered = 16 << 20;
constexpr uint8_t kHeadersFrame = 0x1;
constexpr size_t kFrameHeaderBytes = 9;

void Sleep(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

bool WriteAll(int fd, const char* data, size_t n) {
  while (n > 0) {
    ssize_t w = send(fd, data, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    data += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// Makes close() send a RST instead of a FIN: the peer sees the connection reset.
void ArmReset(int fd) {
  linger l{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
}

int ConnectTo(const std::string& host, int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, host.c_str(), &addr.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

}  // namespace

absl::StatusOr<std::unique_ptr<FaultProxy>> FaultProxy::Start(const std::string& upstream,
                                                              uint64_t seed) {
  std::unique_ptr<FaultProxy> proxy(new FaultProxy());
  size_t colon = upstream.rfind(':');
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(upstream.substr(colon + 1), &proxy->upstream_port_)) {
    return absl::InvalidArgumentError(absl::StrCat("upstream \"", upstream, "\": not host:port"));
  }
  proxy->upstream_host_ = upstream.substr(0, colon);
  proxy->rng_state_ = seed;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = 0;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(fd, 64) != 0 || getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    if (fd >= 0) close(fd);
    return absl::UnavailableError(absl::StrCat("proxy cannot listen: ", std::strerror(errno)));
  }
  proxy->listen_fd_ = fd;
  proxy->port_ = ntohs(addr.sin_port);
  proxy->acceptor_ = std::thread([raw = proxy.get()] { raw->AcceptLoop(); });
  return proxy;
}

FaultProxy::~FaultProxy() {
  stop_.store(true);
  if (acceptor_.joinable()) acceptor_.join();
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    for (int fd : fds_) shutdown(fd, SHUT_RDWR);
    threads.swap(threads_);
  }
  for (auto& t : threads) t.join();
  close(listen_fd_);
}

std::string FaultProxy::address() const { return absl::StrCat("127.0.0.1:", port_); }

void FaultProxy::Heal() {
  blackhole_.store(false);
  delay_ms_.store(0);
  lose_ppm_.store(0);
}

bool FaultProxy::RollLoss() {
  int ppm = lose_ppm_.load();
  if (ppm <= 0) return false;
  absl::MutexLock lock(&mu_);
  // splitmix64
  uint64_t z = (rng_state_ += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  return static_cast<int>(z % 1'000'000) < ppm;
}

void FaultProxy::AcceptLoop() {
  while (!stop_.load()) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) continue;
    int client = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) continue;
    if (open_.load() >= kMaxConnections) {
      ArmReset(client);
      close(client);
      continue;
    }
    int one = 1;
    setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    connections_++;
    open_++;
    absl::MutexLock lock(&mu_);
    fds_.push_back(client);
    threads_.emplace_back([this, client] { Serve(client); });
  }
}

void FaultProxy::Serve(int client) {
  int server = -1;
  bool reset = false;
  while (!stop_.load() && blackhole_.load()) Sleep(20);
  if (!stop_.load()) server = ConnectTo(upstream_host_, upstream_port_);
  if (server >= 0) {
    absl::MutexLock lock(&mu_);
    fds_.push_back(server);
  } else {
    reset = true;
  }
  std::string from_server;
  std::vector<char> buffer(64 * 1024);
  while (server >= 0 && !stop_.load() && !reset) {
    if (blackhole_.load()) {
      Sleep(20);
      continue;
    }
    pollfd p[2] = {{client, POLLIN, 0}, {server, POLLIN, 0}};
    if (poll(p, 2, 50) <= 0) continue;
    if (p[0].revents != 0) {
      ssize_t n = recv(client, buffer.data(), buffer.size(), 0);
      if (n <= 0) break;
      if (int d = delay_ms_.load(); d > 0) Sleep(d);
      if (!WriteAll(server, buffer.data(), static_cast<size_t>(n))) break;
    }
    if (p[1].revents != 0) {
      ssize_t n = recv(server, buffer.data(), buffer.size(), 0);
      if (n <= 0) break;
      from_server.append(buffer.data(), static_cast<size_t>(n));
      if (from_server.size() > kMaxBuffered) break;
      // Pass on whole HTTP/2 frames, and decide on each response's first frame.
      size_t at = 0;
      while (from_server.size() - at >= kFrameHeaderBytes) {
        const auto* h = reinterpret_cast<const uint8_t*>(from_server.data() + at);
        size_t length = (size_t{h[0]} << 16) | (size_t{h[1]} << 8) | h[2];
        uint32_t stream =
            ((uint32_t{h[5]} & 0x7f) << 24) | (uint32_t{h[6]} << 16) | (uint32_t{h[7]} << 8) | h[8];
        if (from_server.size() - at < kFrameHeaderBytes + length) break;
        if (h[3] == kHeadersFrame && stream != 0 && RollLoss()) {
          reset = true;
          break;
        }
        at += kFrameHeaderBytes + length;
      }
      if (reset) responses_lost_++;
      if (int d = delay_ms_.load(); d > 0 && at > 0) Sleep(d);
      if (at > 0 && !WriteAll(client, from_server.data(), at)) break;
      from_server.erase(0, at);
    }
  }
  absl::MutexLock lock(&mu_);
  for (int fd : {client, server}) {
    if (fd < 0) continue;
    if (reset) ArmReset(fd);
    for (auto it = fds_.begin(); it != fds_.end(); ++it) {
      if (*it == fd) {
        fds_.erase(it);
        break;
      }
    }
    close(fd);
  }
  open_--;
}

}  // namespace eonce::testing
