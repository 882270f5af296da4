#include "bench/echo.h"

#include <memory>
#include <utility>

#include "grpcpp/client_context.h"

namespace eonce::bench {
namespace {

class EchoReactor : public grpc::ServerGenericBidiReactor {
 public:
  EchoReactor() { StartRead(&buffer_); }
  void OnReadDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status::OK);
      return;
    }
    StartWriteAndFinish(&buffer_, grpc::WriteOptions(), grpc::Status::OK);
  }
  void OnDone() override { delete this; }

 private:
  grpc::ByteBuffer buffer_;
};

class RelayReactor : public grpc::ServerGenericBidiReactor {
 public:
  explicit RelayReactor(grpc::GenericStub& next) : next_(next) { StartRead(&request_); }
  void OnReadDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status::OK);
      return;
    }
    next_.UnaryCall(&context_, "/bench.Echo/Echo", grpc::StubOptions(), &request_, &response_,
                    [this](grpc::Status status) {
                      if (!status.ok()) {
                        Finish(status);
                        return;
                      }
                      StartWriteAndFinish(&response_, grpc::WriteOptions(), grpc::Status::OK);
                    });
  }
  void OnDone() override { delete this; }

 private:
  grpc::GenericStub& next_;
  grpc::ClientContext context_;
  grpc::ByteBuffer request_, response_;
};

}  // namespace

grpc::ServerGenericBidiReactor* EchoService::CreateReactor(grpc::GenericCallbackServerContext*) {
  return new EchoReactor();
}

grpc::ServerGenericBidiReactor* RelayService::CreateReactor(grpc::GenericCallbackServerContext*) {
  return new RelayReactor(next_);
}

IssueFn EchoCalls(grpc::GenericStub& stub, std::string method, std::string payload) {
  return [&stub, method = std::move(method), payload = std::move(payload)](
             int64_t, std::function<void(bool)> done) {
    struct Call {
      grpc::ClientContext context;
      grpc::ByteBuffer request, response;
    };
    auto call = std::make_shared<Call>();
    grpc::Slice slice(payload);
    call->request = grpc::ByteBuffer(&slice, 1);
    stub.UnaryCall(&call->context, method, grpc::StubOptions(), &call->request, &call->response,
                   [call, done = std::move(done)](grpc::Status s) { done(s.ok()); });
  };
}

}  // namespace eonce::bench
