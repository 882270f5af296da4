#include "dedupe_sidecar/grpc_upstream.h"

#include <chrono>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/command.h"
#include "common/grpc_status.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/channel_arguments.h"

namespace eonce {
namespace {

std::string Flatten(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  std::string out;
  if (!buffer.Dump(&slices).ok()) return out;
  for (const grpc::Slice& slice : slices) {
    out.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  return out;
}

// How long a forward waits for a connection before it gives up without sending.
constexpr int64_t kConnectWaitMs = 1000;

bool IsTerminalBusinessCode(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::NOT_FOUND:
    case grpc::StatusCode::ALREADY_EXISTS:
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::ABORTED:
    case grpc::StatusCode::OUT_OF_RANGE:
      return true;
    default:
      return false;
  }
}

// Turned away before the business ran: no such method, or the caller is not let in.
bool IsRefusal(grpc::StatusCode code) {
  return code == grpc::StatusCode::UNIMPLEMENTED || code == grpc::StatusCode::UNAUTHENTICATED ||
         code == grpc::StatusCode::PERMISSION_DENIED;
}

}  // namespace

GrpcUpstream::GrpcUpstream(const std::string& address, const TlsFiles& tls, Clock& clock,
                           int max_message_bytes)
    : clock_(clock),
      // gRPC's own retries would re-send a mutation; the sidecar decides retries.
      channel_(NewChannel(address, tls, max_message_bytes)),
      generic_(channel_),
      outcome_(v1::Outcome::NewStub(channel_)),
      slot_data_(v1::SlotData::NewStub(channel_)),
      methods_(channel_, clock) {}

namespace {

// One blocking SlotData call, its status converted here.
template <typename Request, typename Response, typename Call>
absl::StatusOr<Response> SlotDataCall(Clock& clock, int64_t deadline_ms, const Request& request,
                                      Call call) {
  grpc::ClientContext context;
  context.set_deadline(WallDeadline(clock, deadline_ms));
  Response response;
  grpc::Status status = call(&context, request, &response);
  if (!status.ok()) return FromGrpcStatus(status, &context);
  return response;
}

}  // namespace

absl::StatusOr<v1::ExportSlotDataResponse> GrpcUpstream::ExportSlotData(
    const v1::ExportSlotDataRequest& request, int64_t deadline_ms) {
  return SlotDataCall<v1::ExportSlotDataRequest, v1::ExportSlotDataResponse>(
      clock_, deadline_ms, request, [this](auto* context, const auto& r, auto* out) {
        return slot_data_->ExportSlotData(context, r, out);
      });
}

absl::StatusOr<v1::ImportSlotDataResponse> GrpcUpstream::ImportSlotData(
    const v1::ImportSlotDataRequest& request, int64_t deadline_ms) {
  return SlotDataCall<v1::ImportSlotDataRequest, v1::ImportSlotDataResponse>(
      clock_, deadline_ms, request, [this](auto* context, const auto& r, auto* out) {
        return slot_data_->ImportSlotData(context, r, out);
      });
}

absl::StatusOr<v1::DropSlotDataResponse> GrpcUpstream::DropSlotData(
    const v1::DropSlotDataRequest& request, int64_t deadline_ms) {
  return SlotDataCall<v1::DropSlotDataRequest, v1::DropSlotDataResponse>(
      clock_, deadline_ms, request, [this](auto* context, const auto& r, auto* out) {
        return slot_data_->DropSlotData(context, r, out);
      });
}

ForwardReply GrpcUpstream::Classify(
    const grpc::Status& status, const std::string& response,
    const std::multimap<grpc::string_ref, grpc::string_ref>& trailers) {
  ForwardReply reply;
  if (auto it = trailers.find(kEntityRevisionTrailer); it != trailers.end()) {
    absl::SimpleAtoi(absl::string_view(it->second.data(), it->second.size()),
                     &reply.entity_revision);
  }
  auto inbox = trailers.find(kInboxTrailer);
  const absl::string_view inbox_says =
      inbox == trailers.end() ? absl::string_view()
                              : absl::string_view(inbox->second.data(), inbox->second.size());
  if (status.error_code() == grpc::StatusCode::ALREADY_EXISTS && inbox_says == kInboxConflict) {
    reply.kind = ForwardReply::Kind::kConflict;
    reply.result.set_code(static_cast<int>(status.error_code()));
    reply.result.set_message(status.error_message());
    reply.result.set_error_details(status.error_details());
    if (auto reason = trailers.find(kReasonTrailer); reason != trailers.end()) {
      reply.detail = std::string(reason->second.data(), reason->second.size());
    }
    return reply;
  }
  if (status.ok() || IsTerminalBusinessCode(status.error_code()) ||
      IsRefusal(status.error_code())) {
    reply.inbox_kept = inbox_says == kInboxKept;
    reply.kind = IsRefusal(status.error_code()) ? ForwardReply::Kind::kRefused
                                                : ForwardReply::Kind::kAnswered;
    reply.result.set_code(static_cast<int>(status.error_code()));
    if (status.ok()) {
      reply.result.set_response(response);
    } else {
      reply.result.set_message(status.error_message());
      reply.result.set_error_details(status.error_details());
    }
    return reply;
  }
  auto not_applied = trailers.find(kNotAppliedTrailer);
  bool proven = not_applied != trailers.end() && not_applied->second == "true" &&
                (status.error_code() == grpc::StatusCode::UNAVAILABLE ||
                 status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  reply.kind = proven ? ForwardReply::Kind::kNotApplied : ForwardReply::Kind::kUnknown;
  reply.detail = absl::StrCat("business call ended ", status.error_code(), ": ",
                              status.error_message());
  return reply;
}

void GrpcUpstream::Forward(ForwardCall call, std::function<void(ForwardReply)> done) {
  // A call is only sent on a connected channel, so that "could not connect" proves that
  // nothing was sent. (A connection lost after this check is an unknown outcome.)
  if (channel_->GetState(/*try_to_connect=*/true) != GRPC_CHANNEL_READY) {
    int64_t wait_ms = std::min<int64_t>(kConnectWaitMs, call.deadline_ms - clock_.NowMs());
    if (wait_ms <= 0 ||
        !channel_->WaitForConnected(WallIn(wait_ms))) {
      ForwardReply reply;
      reply.kind = ForwardReply::Kind::kNotApplied;
      reply.detail = "cannot connect to the business service";
      done(std::move(reply));
      return;
    }
  }
  struct State {
    std::unique_ptr<grpc::ClientContext> context;
    grpc::ByteBuffer request;
    grpc::ByteBuffer response;
  };
  auto state = std::make_shared<State>();
  // Following the caller's call keeps its cancellation; our own deadline is set below
  // and is never later than the caller's.
  state->context = call.parent != nullptr
                       ? grpc::ClientContext::FromCallbackServerContext(*call.parent)
                       : std::make_unique<grpc::ClientContext>();
  state->context->set_deadline(WallDeadline(clock_, call.deadline_ms));
  state->context->AddMetadata(kCommandIdHeader, call.command_id);
  state->context->AddMetadata(kIdempotencyKeyHeader, call.idempotency_key);
  state->context->AddMetadata(kTenantHeader, call.tenant);
  state->context->AddMetadata(kActorHeader, call.actor);
  state->context->AddMetadata(kFencingTokenHeader, absl::StrCat(call.fencing_token));
  if (!call.entity.empty()) state->context->AddMetadata(kEntityHeader, call.entity);
  if (!call.payload_sha256.empty()) {
    state->context->AddMetadata(kPayloadHashHeader, absl::BytesToHexString(call.payload_sha256));
  }
  grpc::Slice slice(call.request);
  state->request = grpc::ByteBuffer(&slice, 1);
  generic_.UnaryCall(state->context.get(), call.method, grpc::StubOptions(), &state->request,
                     &state->response, [state, done = std::move(done)](grpc::Status status) {
                       done(Classify(status, status.ok() ? Flatten(state->response) : "",
                                     state->context->GetServerTrailingMetadata()));
                     });
}

void GrpcUpstream::QueryOutcome(
    const std::string& tenant, const std::string& command_id, int64_t deadline_ms,
    std::function<void(absl::StatusOr<v1::QueryOutcomeResponse>)> done) {
  struct State {
    grpc::ClientContext context;
    v1::QueryOutcomeRequest request;
    v1::QueryOutcomeResponse response;
  };
  auto state = std::make_shared<State>();
  state->context.set_deadline(WallDeadline(clock_, deadline_ms));
  state->context.AddMetadata(kTenantHeader, tenant);
  state->request.set_command_id(command_id);
  outcome_->async()->QueryOutcome(
      &state->context, &state->request, &state->response,
      [state, done = std::move(done)](grpc::Status status) {
        if (!status.ok()) {
          done(FromGrpcStatus(status, &state->context));
        } else {
          done(std::move(state->response));
        }
      });
}

bool GrpcUpstream::Reachable() {
  return channel_->GetState(/*try_to_connect=*/true) != GRPC_CHANNEL_TRANSIENT_FAILURE;
}

}  // namespace eonce
