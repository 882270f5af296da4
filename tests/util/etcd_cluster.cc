#include "tests/util/etcd_cluster.h"

#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/coord/etcd_client.h"
#include "tests/util/temp_dir.h"

namespace eonce::testing {

namespace {

// A loopback port free now (the kernel's pick for port 0). Another process could take it
// before etcd binds it; a member that cannot bind fails to start, and the test says so.
absl::StatusOr<int> FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::InternalError("socket failed");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof(address);
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    close(fd);
    return absl::InternalError("cannot bind a loopback port");
  }
  int port = ntohs(address.sin_port);
  close(fd);
  return port;
}

std::string Url(int port, bool tls = false) {
  return absl::StrCat(tls ? "https" : "http", "://127.0.0.1:", port);
}

}  // namespace

absl::StatusOr<std::unique_ptr<EtcdCluster>> EtcdCluster::Start(int members,
                                                               int64_t timeout_ms,
                                                               const EtcdTls* tls) {
  if (members != 1 && members != 3) return absl::InvalidArgumentError("1 or 3 members");
  if (access(kEtcdBinary, X_OK) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        kEtcdBinary, " is missing: tools/setup.sh installs etcd-server (Debian package)"));
  }
  static std::atomic<int> clusters{0};
  std::unique_ptr<EtcdCluster> cluster(new EtcdCluster());
  cluster->dir_ = FreshDir("etcd");
  if (tls != nullptr) {
    cluster->tls_ = *tls;
    cluster->with_tls_ = true;
  }
  cluster->token_ = absl::StrCat("eonce-test-", getpid(), "-", clusters.fetch_add(1));
  std::vector<std::string> peers;
  for (int i = 0; i < members; ++i) {
    Member member;
    member.name = absl::StrCat("m", i);
    auto client_port = FreePort();
    auto peer_port = FreePort();
    if (!client_port.ok()) return client_port.status();
    if (!peer_port.ok()) return peer_port.status();
    member.client_port = *client_port;
    member.peer_port = *peer_port;
    member.data_dir = absl::StrCat(cluster->dir_, "/", member.name);
    member.log_path = absl::StrCat(cluster->dir_, "/", member.name, ".log");
    peers.push_back(absl::StrCat(member.name, "=", Url(member.peer_port)));
    cluster->members_.push_back(std::move(member));
  }
  cluster->initial_cluster_ = absl::StrJoin(peers, ",");
  // All members first: none has a leader until a quorum runs.
  for (int i = 0; i < members; ++i) {
    absl::Status launched = cluster->Launch(i);
    if (!launched.ok()) return launched;
  }
  for (int i = 0; i < members; ++i) {
    absl::Status healthy = cluster->WaitHealthy(i, timeout_ms);
    if (!healthy.ok()) return healthy;
  }
  return cluster;
}

absl::Status EtcdCluster::Launch(int index) {
  Member& member = members_[index];
  std::vector<std::string> args = {
      "--name", member.name,
      "--data-dir", member.data_dir,
      "--listen-client-urls", Url(member.client_port, with_tls_),
      "--advertise-client-urls", Url(member.client_port, with_tls_),
      "--listen-peer-urls", Url(member.peer_port),
      "--initial-advertise-peer-urls", Url(member.peer_port),
      "--initial-cluster", initial_cluster_,
      "--initial-cluster-token", token_,
      "--initial-cluster-state", "new",
      "--logger", "zap",
      "--log-outputs", "stderr",
  };
  if (with_tls_) {
    args.insert(args.end(), {"--cert-file", tls_.server.cert_file, "--key-file",
                             tls_.server.key_file, "--trusted-ca-file", tls_.server.ca_file,
                             "--client-cert-auth"});
  }
  auto process = Process::Spawn(kEtcdBinary, args, member.log_path);
  if (!process.ok()) return process.status();
  member.process = std::move(*process);
  return absl::OkStatus();
}

EtcdCluster::~EtcdCluster() {
  for (Member& member : members_) {
    if (member.process != nullptr) {
      member.process->Signal(SIGKILL, true);
      member.process.reset();
    }
  }
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

std::string EtcdCluster::Endpoints() const {
  std::vector<std::string> endpoints;
  for (int i = 0; i < size(); ++i) endpoints.push_back(ClientAddress(i));
  return absl::StrJoin(endpoints, ",");
}

std::string EtcdCluster::ClientAddress(int member) const {
  return absl::StrCat("127.0.0.1:", members_[member].client_port);
}

void EtcdCluster::Kill(int member) {
  if (members_[member].process == nullptr) return;
  members_[member].process->Signal(SIGKILL, true);
  members_[member].process.reset();
}

void EtcdCluster::Stop(int member) {
  if (members_[member].process == nullptr) return;
  members_[member].process->Signal(SIGSTOP, false);
  // kill() returns before the member's threads stop; a request already running could
  // still be answered. Waiting for the stop report makes "stopped" true on return.
  int status = 0;
  waitpid(members_[member].process->pid(), &status, WUNTRACED);
}

void EtcdCluster::Continue(int member) {
  if (members_[member].process == nullptr) return;
  members_[member].process->Signal(SIGCONT, false);
  int status = 0;
  waitpid(members_[member].process->pid(), &status, WCONTINUED);
}

absl::Status EtcdCluster::Restart(int member, int64_t timeout_ms) {
  Kill(member);
  absl::Status launched = Launch(member);
  if (!launched.ok()) return launched;
  return WaitHealthy(member, timeout_ms);
}

absl::Status EtcdCluster::WaitHealthy(int member, int64_t timeout_ms) {
  EtcdClientOptions options;
  options.endpoints = {ClientAddress(member)};
  options.call_timeout_ms = 1'000;
  if (with_tls_) options.tls = tls_.client;
  auto client = EtcdClient::Create(options);
  if (!client.ok()) return client.status();
  etcdserverpb::RangeRequest probe;
  probe.set_key("/eonce-test/health");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  absl::Status last = absl::UnavailableError("not tried");
  while (std::chrono::steady_clock::now() < deadline) {
    if (members_[member].process == nullptr || !members_[member].process->Running()) {
      members_[member].process.reset();
      return absl::UnavailableError(absl::StrCat("etcd member ", member, " exited; see ",
                                                 members_[member].log_path));
    }
    last = (*client)->Range(probe).status();
    if (last.ok()) return absl::OkStatus();
    // A member still starting refuses connections at once; this is a poll, not a timing.
    poll(nullptr, 0, 50);
  }
  return absl::UnavailableError(absl::StrCat("etcd member ", member, " did not answer in ",
                                             timeout_ms, " ms (", last.message(), "); see ",
                                             members_[member].log_path));
}

absl::Status EtcdCluster::Compact(int64_t revision) {
  auto code = Process::RunToExit(
      kEtcdctlBinary,
      with_tls_ ? std::vector<std::string>{"--endpoints", Endpoints(), "--cacert",
                                           tls_.client.ca_file, "--cert", tls_.client.cert_file,
                                           "--key", tls_.client.key_file, "compact",
                                           std::to_string(revision), "--physical"}
                : std::vector<std::string>{"--endpoints", Endpoints(), "compact",
                                           std::to_string(revision), "--physical"},
      absl::StrCat(dir_, "/etcdctl.log"));
  if (!code.ok()) return code.status();
  if (*code != 0) {
    return absl::InternalError(absl::StrCat("etcdctl compact exited ", *code, "; see ", dir_,
                                            "/etcdctl.log"));
  }
  return absl::OkStatus();
}

}  // namespace eonce::testing
