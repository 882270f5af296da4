// OwnedRequest: the request of a unary callback call, as something its handler may take
// apart.
//
// gRPC hands a callback handler a const view of the request, but the messages are ones
// it allocated for the call (the MessageHolder that is the call's allocator state), and
// they are the handler's until the call finishes. A handler that keeps part of the
// request for the call's life (a command the sidecar holds while it forwards it) may
// move that part out instead of copying it.
#ifndef EONCE_COMMON_RPC_OWNED_REQUEST_H_
#define EONCE_COMMON_RPC_OWNED_REQUEST_H_

#include "grpcpp/server_context.h"
#include "grpcpp/support/message_allocator.h"

namespace eonce {

// The call's own `request`, mutable; null if the call's allocator state is not the
// holder of `request` (then the handler copies what it keeps).
template <typename Request, typename Response>
Request* OwnedRequest(grpc::CallbackServerContext* context, const Request* request) {
  auto* holder = dynamic_cast<grpc::MessageHolder<Request, Response>*>(
      context->GetRpcAllocatorState());
  return holder != nullptr && holder->request() == request ? holder->request() : nullptr;
}

}  // namespace eonce

#endif  // EONCE_COMMON_RPC_OWNED_REQUEST_H_
