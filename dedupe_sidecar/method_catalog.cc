#include "dedupe_sidecar/method_catalog.h"

#include <chrono>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/grpc_status.h"
#include "eonce/internal/reflection.pb.h"
#include "google/protobuf/descriptor.pb.h"
#include "grpcpp/client_context.h"
#include "grpcpp/impl/codegen/rpc_method.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "grpcpp/support/proto_buffer_writer.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "grpcpp/support/sync_stream.h"

namespace eonce {
namespace {

using Request = internal::reflection::ServerReflectionRequest;
using Response = internal::reflection::ServerReflectionResponse;

constexpr char kReflectionMethod[] =
    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo";

}  // namespace

MethodCatalog::MethodCatalog(std::shared_ptr<grpc::Channel> channel, Clock& clock)
    : channel_(std::move(channel)), clock_(clock) {}

std::optional<bool> MethodCatalog::Implements(const std::string& method) {
  {
    absl::MutexLock lock(&mu_);
    const bool usable = known_ && !unsupported_;
    if (usable && methods_.contains(method)) return true;
    const int64_t now = clock_.NowMs();
    const int64_t recheck_ms = unsupported_ ? kUnsupportedRecheckMs : kFreshMs;
    if (now - tried_at_ms_ < recheck_ms || (usable && now - fetched_at_ms_ < kFreshMs)) {
      return usable ? std::optional<bool>(false) : std::nullopt;
    }
  }
  // Missing from a catalog that may be old: ask the business again before refusing.
  Refresh().IgnoreError();
  absl::MutexLock lock(&mu_);
  if (!known_ || unsupported_) return std::nullopt;
  return methods_.contains(method);
}

bool MethodCatalog::Listed(const std::string& method) {
  absl::MutexLock lock(&mu_);
  return known_ && !unsupported_ && methods_.contains(method);
}

absl::Status MethodCatalog::Refresh() {
  absl::MutexLock one_at_a_time(&refresh_mu_);
  {
    absl::MutexLock lock(&mu_);
    // Another caller refreshed while this one waited.
    if (clock_.NowMs() - tried_at_ms_ < kFreshMs / 10) return absl::OkStatus();
  }
  auto fetched = Fetch();
  absl::MutexLock lock(&mu_);
  tried_at_ms_ = clock_.NowMs();
  if (fetched.ok()) {
    methods_ = std::move(*fetched);
    known_ = true;
    unsupported_ = false;
    fetched_at_ms_ = tried_at_ms_;
    return absl::OkStatus();
  }
  if (fetched.status().code() == absl::StatusCode::kUnimplemented) unsupported_ = true;
  return fetched.status();
}

absl::StatusOr<absl::flat_hash_set<std::string>> MethodCatalog::Fetch() {
  grpc::ClientContext context;
  context.set_deadline(WallIn(kRefreshTimeoutMs));
  grpc::internal::RpcMethod rpc(kReflectionMethod, grpc::internal::RpcMethod::BIDI_STREAMING);
  std::unique_ptr<grpc::ClientReaderWriter<Request, Response>> stream(
      grpc::internal::ClientReaderWriterFactory<Request, Response>::Create(channel_.get(), rpc,
                                                                            &context));
  auto ask = [&](const Request& request, Response* response) {
    return stream->Write(request) && stream->Read(response);
  };
  auto finish = [&]() -> absl::Status {
    stream->WritesDone();
    grpc::Status status = stream->Finish();
    if (status.ok()) return absl::UnavailableError("reflection stream ended early");
    return FromGrpcStatus(status, &context);
  };

  Request list;
  list.set_list_services("*");
  Response listed;
  if (!ask(list, &listed)) return finish();
  if (!listed.has_list_services_response()) {
    stream->WritesDone();
    stream->Finish().ok();
    return absl::UnavailableError("reflection: no service list in the answer");
  }
  absl::flat_hash_set<std::string> methods;
  int services = 0;
  for (const auto& service : listed.list_services_response().service()) {
    // The standard services (health, reflection) are not business methods.
    if (absl::StartsWith(service.name(), "grpc.")) continue;
    if (++services > kMaxServices) break;
    Request describe;
    describe.set_file_containing_symbol(service.name());
    Response described;
    if (!ask(describe, &described)) return finish();
    for (const std::string& bytes : described.file_descriptor_response().file_descriptor_proto()) {
      google::protobuf::FileDescriptorProto file;
      if (!file.ParseFromString(bytes)) continue;
      for (const auto& s : file.service()) {
        std::string full =
            file.package().empty() ? s.name() : absl::StrCat(file.package(), ".", s.name());
        if (full != service.name()) continue;
        for (const auto& m : s.method()) {
          if (methods.size() >= static_cast<size_t>(kMaxMethods)) break;
          methods.insert(absl::StrCat("/", full, "/", m.name()));
        }
      }
    }
  }
  stream->WritesDone();
  grpc::Status status = stream->Finish();
  if (!status.ok()) return FromGrpcStatus(status, &context);
  return methods;
}

}  // namespace eonce
