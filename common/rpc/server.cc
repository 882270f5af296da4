#include "common/rpc/server.h"

#include <signal.h>
#include <sys/stat.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <thread>

#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/base/clock.h"
#include "common/base/status.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/resource_quota.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/server_credentials.h"

namespace eonce {

void BlockShutdownSignals() {
  // Abseil's deadlock detection keeps a lock graph on every Mutex operation; servers
  // leave it to the tests.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

int WaitForShutdownSignal() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  int signal = 0;
  sigwait(&set, &signal);
  return signal;
}

uint64_t MebibytesFlag(const char* name, int64_t mebibytes) {
  if (mebibytes < 0 || mebibytes > (int64_t{1} << 40)) {
    std::cerr << name << ": must be between 0 and 2^40 MiB\n";
    std::exit(2);
  }
  return static_cast<uint64_t>(mebibytes) << 20;
}

void ExitOnSecondSignal() {
  std::thread([] {
    WaitForShutdownSignal();
    std::fprintf(stderr, "second signal: exiting without finishing the drain\n");
    std::_Exit(1);
  }).detach();
}

void EnableStandardServices() {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
}

std::string UnixSocketPath(const std::string& address) {
  if (absl::StartsWith(address, "unix://")) return address.substr(7);
  if (absl::StartsWith(address, "unix:")) return address.substr(5);
  return "";
}

namespace {

// INVALID_ARGUMENT, naming `what`, for a unix socket path longer than the kernel takes.
absl::Status CheckSocketPathLength(const char* what, const std::string& address) {
  if (UnixSocketPath(address).size() <= kMaxUnixSocketPathBytes) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(what, " \"", address,
                                                 "\": a unix socket path may have at most ",
                                                 kMaxUnixSocketPathBytes, " bytes"));
}

}  // namespace

absl::Status AddListener(grpc::ServerBuilder& builder, const std::string& address,
                         const TlsFiles& tls, int* bound_port,
                         std::shared_ptr<grpc::ServerCredentials> credentials) {
  if (address.empty()) return absl::InvalidArgumentError("listen address is empty");
  bool unix_socket = absl::StartsWith(address, "unix:");
  if (!unix_socket && address.find(':') == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("listen address \"", address, "\" must be host:port or unix:/path"));
  }
  EONCE_RETURN_IF_ERROR(CheckSocketPathLength("listen address", address));
  EONCE_RETURN_IF_ERROR(ValidateTlsFiles(tls));
  if (credentials == nullptr) credentials = ServerCredentials(tls);
  builder.AddListeningPort(address, std::move(credentials), unix_socket ? nullptr : bound_port);
  return absl::OkStatus();
}

absl::Status AddLocalSocket(grpc::ServerBuilder& builder, const std::string& address,
                            std::shared_ptr<grpc::ServerCredentials> credentials) {
  if (!absl::StartsWith(address, "unix:") || UnixSocketPath(address).empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("local socket \"", address, "\" must be unix:/path"));
  }
  EONCE_RETURN_IF_ERROR(CheckSocketPathLength("local socket", address));
  if (credentials == nullptr) credentials = grpc::InsecureServerCredentials();
  builder.AddListeningPort(address, std::move(credentials));
  return absl::OkStatus();
}

namespace {

// umask is process-wide: held by whoever has changed it.
absl::Mutex umask_mu(absl::kConstInit);

}  // namespace

std::unique_ptr<grpc::Server> BuildOwnerOnly(grpc::ServerBuilder& builder) {
  absl::MutexLock lock(&umask_mu);
  // 0077 rather than 0177: a directory another thread makes meanwhile stays usable.
  const mode_t before = umask(0077);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  umask(before);
  return server;
}

absl::StatusOr<std::unique_ptr<grpc::Server>> BuildAndServe(grpc::ServerBuilder& builder,
                                                            const std::string& address,
                                                            const std::string& local_socket) {
  std::unique_ptr<grpc::Server> server = BuildOwnerOnly(builder);
  if (server == nullptr) {
    return absl::UnavailableError(absl::StrCat(
        "listen: cannot bind ", address, local_socket.empty() ? "" : " or ", local_socket));
  }
  // A unix socket is for this process's own user only (the containers of one pod share
  // it): whoever can open it is trusted as a local caller. It was made 0700 (umask 0077);
  // no one but the owner could open it in between, and 0600 is the mode to show.
  for (const std::string* listened : {&address, &local_socket}) {
    if (std::string path = UnixSocketPath(*listened); !path.empty() &&
                                                       chmod(path.c_str(), 0600) != 0) {
      return absl::InternalError(absl::StrCat("listen: cannot restrict ", path, " to 0600"));
    }
  }
  SetServing(*server, nullptr, true);
  return server;
}

void SetServing(grpc::Server& server, HealthPort* health_port, bool serving) {
  if (auto* health = server.GetHealthCheckService(); health != nullptr) {
    health->SetServingStatus(serving);
  }
  if (health_port != nullptr) health_port->SetServing(serving);
}

void StopServing(std::unique_ptr<grpc::Server>& server, std::unique_ptr<HealthPort>& health_port,
                 int64_t drain_ms) {
  if (server == nullptr) return;
  SetServing(*server, health_port.get(), false);
  server->Shutdown(WallIn(drain_ms));
  server->Wait();
  server.reset();
  health_port.reset();
}

absl::StatusOr<std::unique_ptr<HealthPort>> HealthPort::Start(const std::string& address) {
  if (address.find(':') == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("health_listen: \"", address, "\" must be host:port"));
  }
  grpc::EnableDefaultHealthCheckService(true);
  std::unique_ptr<HealthPort> port(new HealthPort());
  grpc::ServerBuilder builder;
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &port->port_);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, 16);
  builder.SetMaxReceiveMessageSize(4096);
  port->server_ = builder.BuildAndStart();
  if (port->server_ == nullptr) {
    return absl::UnavailableError(absl::StrCat("health_listen: cannot bind ", address));
  }
  port->SetServing(true);
  return port;
}

HealthPort::~HealthPort() {
  if (server_ != nullptr) {
    server_->Shutdown(WallIn(0));
    server_->Wait();
  }
}

void HealthPort::SetServing(bool serving) {
  if (auto* health = server_->GetHealthCheckService(); health != nullptr) {
    health->SetServingStatus(serving);
  }
}

void ApplyServerLimits(grpc::ServerBuilder& builder, int max_message_bytes,
                       int max_concurrent_streams, int64_t memory_quota_bytes) {
  if (memory_quota_bytes > 0) {
    grpc::ResourceQuota quota("eonce-server");
    quota.Resize(static_cast<size_t>(memory_quota_bytes));
    builder.SetResourceQuota(quota);
  }
  builder.SetMaxReceiveMessageSize(max_message_bytes);
  builder.SetMaxSendMessageSize(max_message_bytes);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, max_concurrent_streams);
  // Callers' metadata is small (ids and tokens); 16 KiB is ample and bounds abuse.
  builder.AddChannelArgument(GRPC_ARG_MAX_METADATA_SIZE, 16 * 1024);
}

std::string BoundAddress(const std::string& address, int port) {
  if (port <= 0 || !UnixSocketPath(address).empty()) return address;
  size_t colon = address.rfind(':');
  return absl::StrCat(address.substr(0, colon), ":", port);
}

void AnnounceListening(const char* name, const std::string& address, int port) {
  const std::string where = BoundAddress(address, port);
  std::printf("%s listening on %s\n", name, where.c_str());
  std::fflush(stdout);
}

}  // namespace eonce
