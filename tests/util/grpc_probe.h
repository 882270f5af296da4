// Calling a server the way an outsider can: by method name, with whatever identity
// headers the caller chooses, without the service's generated stub. For tests that walk
// every method a server registers (tests/security/authz_matrix_test.cc).
//
//   ReflectedServices  the service names a server lists through gRPC server reflection
//                      (grpc.reflection.v1alpha), as any client can ask for them;
//   ChannelWithHeaders a channel that adds the same request headers to every call made
//                      on it (typed stubs included), e.g. eonce-tenant for plaintext;
//   CallMethod         one call of any method: the request as serialized bytes, the
//                      answer as its status (with eonce's reason, FromGrpcStatus) and its
//                      serialized messages.
//
// Every call has a deadline (kProbeTimeoutMs) so that a server that hangs fails the test
// instead of stalling it. Thread-safe (each call has its own context).
#ifndef EONCE_TESTS_UTIL_GRPC_PROBE_H_
#define EONCE_TESTS_UTIL_GRPC_PROBE_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/channel.h"
#include "grpcpp/security/credentials.h"

namespace eonce::testing {

inline constexpr int64_t kProbeTimeoutMs = 10'000;

using Headers = std::vector<std::pair<std::string, std::string>>;

// The fully qualified names of the services `channel`'s server lists through reflection.
absl::StatusOr<std::vector<std::string>> ReflectedServices(
    const std::shared_ptr<grpc::Channel>& channel);

// A channel to `address` with `credentials` whose every call carries `headers`. It has a
// subchannel pool of its own, so that channels with different client certificates never
// share a connection.
std::shared_ptr<grpc::Channel> ChannelWithHeaders(
    const std::string& address, const std::shared_ptr<grpc::ChannelCredentials>& credentials,
    Headers headers);

struct ProbeAnswer {
  // The call's end, reason and metadata included (FromGrpcStatus). A server-streaming
  // method that accepted the call is OK (the probe hung up once the headers came).
  absl::Status status;
  // The response messages, serialized (a unary call has at most one).
  std::vector<std::string> responses;
};

// Calls `method` ("/package.Service/Method") once with `request` (a serialized message)
// and `metadata` besides the channel's headers. A unary or client-streaming method is
// answered as usual. A server-streaming method (`server_streaming`) that accepts the call
// may stream for ever: the probe waits for the server's headers, then hangs up; a refusal
// comes with the headers (a trailers-only answer) and is what the probe reports.
ProbeAnswer CallMethod(const std::shared_ptr<grpc::Channel>& channel, const std::string& method,
                       const std::string& request, bool server_streaming,
                       const Headers& metadata = {});

}  // namespace eonce::testing

#endif  // EONCE_TESTS_UTIL_GRPC_PROBE_H_
