#include "dedupe_sidecar/upstream/method_catalog.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/clock.h"
#include "common/rpc/grpc_status.h"
#include "common/base/status.h"
#include "eonce/internal/health.pb.h"
#include "eonce/internal/reflection.pb.h"
#include "google/protobuf/descriptor.pb.h"
#include "grpcpp/client_context.h"
#include "grpcpp/impl/codegen/client_unary_call.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "grpcpp/impl/codegen/rpc_method.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "grpcpp/support/proto_buffer_writer.h"
#include "grpcpp/support/sync_stream.h"

namespace eonce {
namespace {

using Request = internal::reflection::ServerReflectionRequest;
using Response = internal::reflection::ServerReflectionResponse;
using HealthRequest = internal::health::HealthCheckRequest;
using HealthResponse = internal::health::HealthCheckResponse;

constexpr char kReflectionMethod[] =
    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo";
constexpr char kHealthCheckMethod[] = "/grpc.health.v1.Health/Check";

}  // namespace

MethodCatalog::MethodCatalog(std::shared_ptr<grpc::Channel> channel, Clock& clock,
                             int64_t refresh_timeout_ms)
    : channel_(std::move(channel)), clock_(clock), refresh_timeout_ms_(refresh_timeout_ms) {
  {
    absl::MutexLock lock(&mu_);
    due_ = true;  // the first read, at once
  }
  reader_ = std::thread([this] { ReaderLoop(); });
}

MethodCatalog::~MethodCatalog() { Stop(); }

MethodKnown MethodCatalog::Knows(const std::string& method) {
  absl::MutexLock lock(&mu_);
  if (known_ && methods_.contains(method)) return MethodKnown::kServed;
  const int64_t now = clock_.NowMs();
  if (unsupported_) {
    if (now - tried_at_ms_ >= kUnsupportedRecheckMs) RequestReadLocked(now);
    return MethodKnown::kCannotTell;
  }
  if (known_ && !due_ && !reading_ && now - fetched_at_ms_ < kFreshMs) {
    return MethodKnown::kNotServed;
  }
  // No catalog from the serving business yet, or one that may be old: ask again in the
  // background, and let the caller come back rather than wait here.
  RequestReadLocked(now);
  return MethodKnown::kNotYetKnown;
}

bool MethodCatalog::Listed(const std::string& method) {
  absl::MutexLock lock(&mu_);
  return known_ && methods_.contains(method);
}

void MethodCatalog::RequestReadLocked(int64_t now_ms) {
  if (due_ || reading_ || stopping_) return;
  if (reads_ > 0 && now_ms - tried_at_ms_ < kMinRefreshIntervalMs) return;
  due_ = true;
}

bool MethodCatalog::AwaitSettled(absl::Duration limit) {
  absl::MutexLock lock(&mu_);
  auto settled = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stopping_ || (!due_ && !reading_);
  };
  return mu_.AwaitWithTimeout(absl::Condition(&settled), limit);
}

void MethodCatalog::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    if (in_flight_ != nullptr) in_flight_->TryCancel();
  }
  absl::MutexLock one_join(&stop_mu_);
  if (reader_.joinable()) reader_.join();
}

int64_t MethodCatalog::reads() const {
  absl::MutexLock lock(&mu_);
  return reads_;
}

int64_t MethodCatalog::catalogs() const {
  absl::MutexLock lock(&mu_);
  return catalogs_;
}

void MethodCatalog::ReaderLoop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      auto wanted = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return due_ || stopping_; };
      mu_.Await(absl::Condition(&wanted));
      if (stopping_) return;
      due_ = false;
      reading_ = true;
    }
    absl::StatusOr<absl::flat_hash_set<std::string>> fetched = Fetch();
    absl::MutexLock lock(&mu_);
    reading_ = false;
    ++reads_;
    tried_at_ms_ = clock_.NowMs();
    if (fetched.ok()) {
      methods_ = std::move(*fetched);
      known_ = true;
      unsupported_ = false;
      fetched_at_ms_ = tried_at_ms_;
      ++catalogs_;
    } else if (fetched.status().code() == absl::StatusCode::kUnimplemented) {
      known_ = false;
      unsupported_ = true;
      methods_.clear();
    }
    // Otherwise (not serving, unreachable, a call cut short) the catalog held stays and
    // ages: what it lists is still forwarded, what it does not is not known yet.
  }
}

bool MethodCatalog::Track(grpc::ClientContext* context) {
  context->set_deadline(WallIn(refresh_timeout_ms_));
  // On the reader's own thread a read may wait for a business coming up (a restart in the
  // same pod), rather than fail at once and leave its commands not knowing until the next.
  context->set_wait_for_ready(true);
  absl::MutexLock lock(&mu_);
  if (stopping_) return false;
  in_flight_ = context;
  return true;
}

void MethodCatalog::Untrack() {
  absl::MutexLock lock(&mu_);
  in_flight_ = nullptr;
}

absl::Status MethodCatalog::CheckServing() {
  grpc::ClientContext context;
  if (!Track(&context)) return absl::CancelledError("the catalog is stopping");
  grpc::internal::RpcMethod rpc(kHealthCheckMethod, grpc::internal::RpcMethod::NORMAL_RPC);
  HealthResponse response;
  grpc::Status status = grpc::internal::BlockingUnaryCall<HealthRequest, HealthResponse>(
      channel_.get(), rpc, &context, HealthRequest(), &response);
  Untrack();
  // Without a health service nothing can tell whether it serves: its catalog is taken.
  if (status.error_code() == grpc::StatusCode::UNIMPLEMENTED) return absl::OkStatus();
  if (!status.ok()) return FromGrpcStatus(status, &context);
  if (response.status() == HealthResponse::SERVING) return absl::OkStatus();
  return Error(absl::StatusCode::kUnavailable, "NOT_SERVING",
               absl::StrCat("the business is not serving yet (grpc.health.v1: ",
                            HealthResponse::ServingStatus_Name(response.status()), ")"));
}

absl::StatusOr<absl::flat_hash_set<std::string>> MethodCatalog::Fetch() {
  // Serving before and after: a catalog read while the business started, or restarted,
  // may lack services it registers later.
  EONCE_RETURN_IF_ERROR(CheckServing());
  EONCE_ASSIGN_OR_RETURN(absl::flat_hash_set<std::string> methods, FetchMethods());
  EONCE_RETURN_IF_ERROR(CheckServing());
  return methods;
}

absl::StatusOr<absl::flat_hash_set<std::string>> MethodCatalog::FetchMethods() {
  grpc::ClientContext context;
  if (!Track(&context)) return absl::CancelledError("the catalog is stopping");
  struct Untracked {
    MethodCatalog* catalog;
    ~Untracked() { catalog->Untrack(); }
  } untracked{this};
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
