#include "tools/demo/local_etcd.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/base/clock.h"

namespace eonce::demo {
namespace {

constexpr char kEtcd[] = "/usr/bin/etcd";

// A loopback port free now (the kernel's pick for port 0): etcd takes no port 0.
absl::StatusOr<int> FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::InternalError("socket failed");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    close(fd);
    return absl::InternalError("cannot bind a loopback port");
  }
  const int port = ntohs(address.sin_port);
  close(fd);
  return port;
}

}  // namespace

absl::StatusOr<std::unique_ptr<LocalEtcd>> LocalEtcd::Start(const std::string& dir) {
  if (access(kEtcd, X_OK) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(kEtcd, " is missing: `./eonce setup` installs etcd (the shards need it)"));
  }
  absl::StatusOr<int> client = FreePort(), peer = FreePort();
  if (!client.ok()) return client.status();
  if (!peer.ok()) return peer.status();
  std::unique_ptr<LocalEtcd> etcd(new LocalEtcd());
  etcd->endpoint_ = absl::StrCat("127.0.0.1:", *client);
  const std::string client_url = absl::StrCat("http://", etcd->endpoint_);
  const std::string peer_url = absl::StrCat("http://127.0.0.1:", *peer);
  auto process = Process::Spawn(
      kEtcd,
      {"--name", "demo", "--data-dir", dir + "/etcd", "--listen-client-urls", client_url,
       "--advertise-client-urls", client_url, "--listen-peer-urls", peer_url,
       "--initial-advertise-peer-urls", peer_url, "--initial-cluster", "demo=" + peer_url,
       "--logger", "zap", "--log-outputs", "stderr"},
      dir + "/etcd.log");
  if (!process.ok()) return process.status();
  etcd->process_ = std::move(*process);
  EtcdCoordOptions options;
  options.endpoints = etcd->endpoint_;
  options.prefix = kDemoEtcdPrefix;
  auto coordination = EtcdCoordination::Create(options, RealClock::Get());
  if (!coordination.ok()) return coordination.status();
  etcd->coordination_ = std::move(*coordination);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (;;) {
    absl::StatusOr<SlotMap> read = etcd->store().Read();
    if (read.ok() || read.status().code() == absl::StatusCode::kNotFound) return etcd;
    if (std::chrono::steady_clock::now() > deadline || !etcd->process_->Running()) {
      return absl::UnavailableError(absl::StrCat("etcd did not come up (",
                                                 read.status().message(), "); see ", dir,
                                                 "/etcd.log"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

LocalEtcd::~LocalEtcd() {
  coordination_.reset();
  if (process_ != nullptr) process_->Signal(SIGTERM, true);
}

}  // namespace eonce::demo
