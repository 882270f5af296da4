// The echo servers the bench measures its limits with: the loopback gRPC round trip (one
// hop), and a relay that passes each call on to an echo server and its answer back (two
// hops, as a command through a sidecar to its business takes).
#ifndef EONCE_BENCH_ECHO_H_
#define EONCE_BENCH_ECHO_H_

#include <string>

#include "bench/loops.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/generic/generic_stub.h"

namespace eonce::bench {

// Answers every call with its request bytes.
class EchoService : public grpc::CallbackGenericService {
 public:
  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext*) override;
};

// Sends every call's request bytes to `next` (an echo server) and answers with its
// answer. `next` must outlive the service.
class RelayService : public grpc::CallbackGenericService {
 public:
  explicit RelayService(grpc::GenericStub& next) : next_(next) {}
  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext*) override;

 private:
  grpc::GenericStub& next_;
};

// Each call of the function sends one `method` call carrying `payload` on `stub`, which
// must outlive it.
IssueFn EchoCalls(grpc::GenericStub& stub, std::string method, std::string payload);

}  // namespace eonce::bench

#endif  // EONCE_BENCH_ECHO_H_
