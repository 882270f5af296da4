#include "tests/util/grpc_probe.h"

#include <chrono>

#include "common/rpc/grpc_status.h"
#include "eonce/internal/reflection.pb.h"
#include "grpcpp/client_context.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "grpcpp/impl/codegen/rpc_method.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/client_interceptor.h"
#include "grpcpp/support/sync_stream.h"

namespace eonce::testing {
namespace {

constexpr char kReflectionMethod[] =
    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo";

// Far more than any eonce server registers; a longer list is a server gone wrong.
constexpr int kMaxServices = 256;

void SetDeadline(grpc::ClientContext& context) {
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::milliseconds(kProbeTimeoutMs));
}

// A stream of `Out` to and `In` from `method`, whatever the method's declared kind: on
// the wire every gRPC call is a stream, so one shape calls them all.
template <typename Out, typename In>
std::unique_ptr<grpc::ClientReaderWriter<Out, In>> OpenStream(grpc::Channel& channel,
                                                              const std::string& method,
                                                              grpc::ClientContext* context) {
  grpc::internal::RpcMethod rpc(method.c_str(), grpc::internal::RpcMethod::BIDI_STREAMING);
  return std::unique_ptr<grpc::ClientReaderWriter<Out, In>>(
      grpc::internal::ClientReaderWriterFactory<Out, In>::Create(&channel, rpc, context));
}

class HeaderInterceptor : public grpc::experimental::Interceptor {
 public:
  explicit HeaderInterceptor(const Headers& headers) : headers_(headers) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      std::multimap<std::string, std::string>* metadata = methods->GetSendInitialMetadata();
      for (const auto& [name, value] : headers_) metadata->emplace(name, value);
    }
    methods->Proceed();
  }

 private:
  const Headers& headers_;
};

class HeaderInterceptorFactory : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit HeaderInterceptorFactory(Headers headers) : headers_(std::move(headers)) {}

  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo* /*info*/) override {
    return new HeaderInterceptor(headers_);
  }

 private:
  const Headers headers_;  // outlives every interceptor: the channel owns the factory
};

// One call of any method, on gRPC's callback API. A server-streaming call that the server
// accepted may stay open for ever: the probe hangs up once the server's headers come. A
// refusal comes as a trailers-only answer, which the callback API reports as headers
// not read (`ok` false): the probe then waits for the status instead, so a hang-up never
// masks a refusal.
class ProbeCall : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  ProbeCall(grpc::ClientContext* context, bool server_streaming)
      : context_(context), server_streaming_(server_streaming) {}

  void Start(const std::string& request) {
    grpc::Slice slice(request);
    request_ = grpc::ByteBuffer(&slice, 1);
    StartWrite(&request_);
    StartWritesDone();
    if (!server_streaming_) StartRead(&in_);
    StartCall();
  }

  void OnReadInitialMetadataDone(bool ok) override {
    if (server_streaming_ && ok) context_->TryCancel();
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;
    std::vector<grpc::Slice> slices;
    std::string bytes;
    if (in_.Dump(&slices).ok()) {
      for (const grpc::Slice& s : slices) {
        bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
      }
    }
    {
      absl::MutexLock lock(&mu_);
      responses_.push_back(std::move(bytes));
    }
    StartRead(&in_);
  }

  void OnDone(const grpc::Status& status) override {
    absl::MutexLock lock(&mu_);
    status_ = status;
    done_ = true;
  }

  grpc::Status Wait() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&done_));
    return status_;
  }

  std::vector<std::string> TakeResponses() {
    absl::MutexLock lock(&mu_);
    return std::move(responses_);
  }

 private:
  grpc::ClientContext* const context_;
  const bool server_streaming_;
  grpc::ByteBuffer request_;
  grpc::ByteBuffer in_;
  absl::Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status status_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> responses_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::StatusOr<std::vector<std::string>> ReflectedServices(
    const std::shared_ptr<grpc::Channel>& channel) {
  using Request = internal::reflection::ServerReflectionRequest;
  using Response = internal::reflection::ServerReflectionResponse;
  grpc::ClientContext context;
  SetDeadline(context);
  auto stream = OpenStream<Request, Response>(*channel, kReflectionMethod, &context);
  Request list;
  list.set_list_services("*");
  Response listed;
  const bool answered = stream->Write(list) && stream->Read(&listed);
  stream->WritesDone();
  grpc::Status finished = stream->Finish();
  if (!finished.ok()) return FromGrpcStatus(finished, &context);
  if (!answered || !listed.has_list_services_response()) {
    return absl::UnavailableError("reflection: no service list in the answer");
  }
  std::vector<std::string> services;
  for (const auto& service : listed.list_services_response().service()) {
    if (services.size() >= kMaxServices) {
      return absl::OutOfRangeError("reflection: more services than a server should have");
    }
    services.push_back(service.name());
  }
  return services;
}

std::shared_ptr<grpc::Channel> ChannelWithHeaders(
    const std::string& address, const std::shared_ptr<grpc::ChannelCredentials>& credentials,
    Headers headers) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  // A probe's call is sent once: a transparent retry could run a refused mutation twice
  // in the server's eyes and muddle what the test observes.
  args.SetInt(GRPC_ARG_ENABLE_RETRIES, 0);
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> factories;
  factories.push_back(std::make_unique<HeaderInterceptorFactory>(std::move(headers)));
  return grpc::experimental::CreateCustomChannelWithInterceptors(address, credentials, args,
                                                                 std::move(factories));
}

ProbeAnswer CallMethod(const std::shared_ptr<grpc::Channel>& channel, const std::string& method,
                       const std::string& request, bool server_streaming,
                       const Headers& metadata) {
  grpc::ClientContext context;
  SetDeadline(context);
  for (const auto& [name, value] : metadata) context.AddMetadata(name, value);
  grpc::GenericStub stub(channel);
  ProbeCall call(&context, server_streaming);
  stub.PrepareBidiStreamingCall(&context, method, grpc::StubOptions(), &call);
  call.Start(request);
  grpc::Status finished = call.Wait();
  // The stream was open until the probe hung up: the server accepted the call.
  if (server_streaming && finished.error_code() == grpc::StatusCode::CANCELLED) {
    finished = grpc::Status::OK;
  }
  ProbeAnswer answer;
  answer.status = FromGrpcStatus(finished, &context);
  answer.responses = call.TakeResponses();
  return answer;
}

}  // namespace eonce::testing
