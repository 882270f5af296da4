// What every eonce server binary shares (flag parsing is in common/base/flags.h): signal
// handling for graceful shutdown, and the standard gRPC extras (health checking,
// reflection).
#ifndef EONCE_COMMON_RPC_SERVER_H_
#define EONCE_COMMON_RPC_SERVER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/rpc/tls.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"

namespace eonce {

// A size given in MiB by flag `name`, in bytes; a negative value exits 2 naming the flag.
uint64_t MebibytesFlag(const char* name, int64_t mebibytes);

// Blocks SIGTERM and SIGINT in this thread and every thread it starts later. Call it
// first in main, before any server or store starts threads.
void BlockShutdownSignals();

// Waits for SIGTERM or SIGINT; returns the signal number.
int WaitForShutdownSignal();

// Starts a watcher that ends the process at once (exit code 1) on a second SIGTERM or
// SIGINT: the operator's way past a drain that takes too long. Durable state covers it.
void ExitOnSecondSignal();

// Adds health checking and server reflection to every server built after this call.
void EnableStandardServices();

// What the kernel takes for a unix socket's path (sun_path, less its terminating NUL).
inline constexpr size_t kMaxUnixSocketPathBytes = 107;

// The file of a "unix:/path" or "unix:///path" address; empty for any other address.
std::string UnixSocketPath(const std::string& address);

// Adds a listening port: "host:port" or "unix:/path", mutual TLS when `tls` is enabled.
// `bound_port` receives the port. `credentials`, when given, replace the ones `tls` makes
// (a business port's, which check every caller: services/inbox/caller_gate.h); they must
// be made from the same `tls`.
absl::Status AddListener(grpc::ServerBuilder& builder, const std::string& address,
                         const TlsFiles& tls, int* bound_port,
                         std::shared_ptr<grpc::ServerCredentials> credentials = nullptr);

// Adds a second, plaintext listening port on a unix socket ("unix:/path"), for the pod's
// own containers (a business's sidecar) while the main address serves other callers.
// INVALID_ARGUMENT for any other kind of address or a path that is too long.
// `credentials`: plaintext ones of the caller's (null: gRPC's insecure credentials).
absl::Status AddLocalSocket(grpc::ServerBuilder& builder, const std::string& address,
                            std::shared_ptr<grpc::ServerCredentials> credentials = nullptr);

// Builds and starts the server with every unix socket among its listeners owner-only from
// the moment it exists: the process's umask is 0077 while gRPC binds. The umask is the
// process's, so one server binds at a time (a mutex), and what other threads of this
// process create meanwhile is owner-only too -- never less than they asked for. Null when
// a port cannot be bound. BuildAndServe is this and what a server does next.
std::unique_ptr<grpc::Server> BuildOwnerOnly(grpc::ServerBuilder& builder);

// Builds and starts the server (BuildOwnerOnly) and marks it serving; UNAVAILABLE naming
// the address when it cannot bind. Every unix socket among `address` and `local_socket`
// (empty: none) is the process's own user's: created so, then set to 0600.
absl::StatusOr<std::unique_ptr<grpc::Server>> BuildAndServe(grpc::ServerBuilder& builder,
                                                            const std::string& address,
                                                            const std::string& local_socket = "");

// A plaintext port that serves grpc.health.v1 only, for probes that cannot present a
// client certificate (the kubelet's) when the main port speaks mutual TLS. It reveals
// nothing but readiness, which follows the component's.
class HealthPort {
 public:
  // `address`: host:port. UNAVAILABLE naming it when it cannot bind.
  static absl::StatusOr<std::unique_ptr<HealthPort>> Start(const std::string& address);
  ~HealthPort();

  void SetServing(bool serving);
  int port() const { return port_; }

 private:
  HealthPort() = default;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

// Sets the serving status of every service in `server`'s health service, and of the
// health-only port when there is one.
void SetServing(grpc::Server& server, HealthPort* health_port, bool serving);

// The end of a drain: readiness off (the health-only port too), new calls refused,
// in-flight calls given up to `drain_ms`, then the server and the health port are gone.
// Does nothing when `server` is already gone.
void StopServing(std::unique_ptr<grpc::Server>& server, std::unique_ptr<HealthPort>& health_port,
                 int64_t drain_ms);

// The limits every server applies: message size, concurrent streams, and (when
// `memory_quota_bytes` > 0) a gRPC resource quota on the memory its calls may take.
void ApplyServerLimits(grpc::ServerBuilder& builder, int max_message_bytes,
                       int max_concurrent_streams, int64_t memory_quota_bytes = 0);

// The address callers dial: `address` with the port it was given replaced by `port` (the
// one bound, for port 0); a unix socket's address as it is.
std::string BoundAddress(const std::string& address, int port);

// Writes a single line "listening on <address>" (BoundAddress) for the scripts that
// start us.
void AnnounceListening(const char* name, const std::string& address, int port);

}  // namespace eonce

#endif  // EONCE_COMMON_RPC_SERVER_H_
