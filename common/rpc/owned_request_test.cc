// OwnedRequest over a real gRPC server on loopback: a callback handler gets its call's
// own request, and may move what it keeps out of it.
#include "common/rpc/owned_request.h"

#include <atomic>
#include <memory>
#include <string>
#include <utility>

#include "eonce/v1/sidecar.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace eonce {
namespace {

// Answers each Submit with the command id it kept (as its result's message), and notes
// what it saw of the request (on gRPC's thread, read by the test's after the call).
class KeepingService : public v1::Sidecar::CallbackService {
 public:
  grpc::ServerUnaryReactor* Submit(grpc::CallbackServerContext* context,
                                   const v1::SubmitRequest* request,
                                   v1::SubmitResponse* response) override {
    v1::SubmitRequest* owned =
        OwnedRequest<v1::SubmitRequest, v1::SubmitResponse>(context, request);
    owned_ = owned != nullptr;
    // Another request than the call's is not the call's to take apart.
    v1::SubmitRequest stranger;
    stranger_owned_ =
        OwnedRequest<v1::SubmitRequest, v1::SubmitResponse>(context, &stranger) != nullptr;
    v1::Command kept;
    if (owned != nullptr) {
      kept = std::move(*owned->mutable_command());
    } else {
      kept = request->command();
    }
    request_left_empty_ = request->command().command_id().empty();
    response->mutable_result()->set_message(kept.command_id());
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  std::atomic<bool> owned_{false};
  std::atomic<bool> stranger_owned_{true};
  std::atomic<bool> request_left_empty_{false};
};

TEST(OwnedRequestTest, AHandlerTakesItsOwnRequestApartAndNoOtherMessage) {
  KeepingService service;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  auto stub = v1::Sidecar::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));

  v1::SubmitRequest request;
  request.mutable_command()->set_command_id("cmd-kept-by-the-handler");
  v1::SubmitResponse response;
  grpc::ClientContext context;
  ASSERT_TRUE(stub->Submit(&context, request, &response).ok());

  EXPECT_TRUE(service.owned_);
  EXPECT_FALSE(service.stranger_owned_);
  // Moved: the handler kept the command, and the request no longer holds it.
  EXPECT_EQ(response.result().message(), "cmd-kept-by-the-handler");
  EXPECT_TRUE(service.request_left_empty_);
  server->Shutdown();
}

}  // namespace
}  // namespace eonce
