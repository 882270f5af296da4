#include "dedupe_sidecar/upstream/grpc_upstream.h"

#include <chrono>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/base/clock.h"
#include "common/command/command.h"
#include "common/rpc/grpc_status.h"
#include "common/base/status.h"
#include "common/command/trace_context.h"
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

ForwardReply NotConnected() {
  ForwardReply reply;
  reply.kind = ForwardReply::Kind::kNotApplied;
  reply.detail = "cannot connect to the business service";
  return reply;
}

ForwardReply Closed() {
  ForwardReply reply;
  reply.kind = ForwardReply::Kind::kNotApplied;
  reply.detail = "the sidecar is shutting down; nothing was sent";
  return reply;
}

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

ForwardReply Reply(ForwardReply::Kind kind, const absl::Status& status) {
  ForwardReply reply;
  reply.kind = kind;
  reply.detail = status.ToString();
  return reply;
}

// A refusal that proves the business applied nothing: UNAVAILABLE or RESOURCE_EXHAUSTED
// with `eonce-not-applied: true`.
bool ProvesNotApplied(const grpc::Status& status,
                      const std::multimap<grpc::string_ref, grpc::string_ref>& trailers) {
  auto not_applied = trailers.find(kNotAppliedTrailer);
  return not_applied != trailers.end() && not_applied->second == "true" &&
         (status.error_code() == grpc::StatusCode::UNAVAILABLE ||
          status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
}

// FAILED_PRECONDITION SLOT_FENCED: a write refused by the business's per-slot fence.
bool IsSlotFenced(const grpc::Status& status) {
  return status.error_code() == grpc::StatusCode::FAILED_PRECONDITION &&
         ReasonOf(StatusFromParts(status.error_code(), status.error_message(),
                                  status.error_details())) == kSlotFencedReason;
}

}  // namespace

GrpcUpstream::GrpcUpstream(const std::string& address, const TlsFiles& tls, Clock& clock,
                           int max_message_bytes, int batch_calls, int64_t catalog_timeout_ms)
    : clock_(clock),
      // gRPC's own retries would re-send a mutation; the sidecar decides retries.
      channel_(NewChannel(address, tls, max_message_bytes)),
      generic_(channel_),
      outcome_(v1::Outcome::NewStub(channel_)),
      slot_data_(v1::SlotData::NewStub(channel_)),
      forwards_(v1::Forwards::NewStub(channel_)),
      effects_(v1::Effects::NewStub(channel_)),
      methods_(channel_, clock, catalog_timeout_ms) {
  if (batch_calls <= 0) return;
  CallBatcherOptions options;
  options.max_calls = batch_calls;
  options.max_batch = kMaxBatchCommands;
  // Room in the message for the items' framing and identities.
  options.max_batch_bytes = static_cast<size_t>(max_message_bytes) / 2;
  batcher_ = std::make_unique<Batcher>(
      "the business",
      options,
      Batcher::Hooks{
          [this](std::vector<ForwardCall> calls, int64_t deadline_ms, Batcher::BatchDone done) {
            ForwardMany(std::move(calls), deadline_ms, std::move(done));
          },
          [](const ForwardCall& call) { return call.request.size() + 256; },
          // Sent in a batch call that failed: unknown, unless the call proved otherwise.
          [](const absl::Status& status) { return Reply(ForwardReply::Kind::kUnknown, status); },
          // Refused for want of room: never sent.
          [](const absl::Status& status) {
            return Reply(ForwardReply::Kind::kNotApplied, status);
          }});
}

GrpcUpstream::~GrpcUpstream() { Close(); }

namespace {

// One blocking SlotData call, its status converted here.
template <typename Request, typename Response, typename Call>
absl::StatusOr<Response> SlotDataCall(Clock& clock, int64_t deadline_ms, const Request& request,
                                      Call call) {
  grpc::ClientContext context;
  context.set_deadline(WallDeadline(clock, deadline_ms));
  context.AddMetadata(kComponentHeader, kSidecarComponent);
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

absl::StatusOr<v1::HoldSlotDataResponse> GrpcUpstream::HoldSlotData(
    const v1::HoldSlotDataRequest& request, int64_t deadline_ms) {
  return SlotDataCall<v1::HoldSlotDataRequest, v1::HoldSlotDataResponse>(
      clock_, deadline_ms, request, [this](auto* context, const auto& r, auto* out) {
        return slot_data_->HoldSlotData(context, r, out);
      });
}

absl::StatusOr<v1::DropSlotDataResponse> GrpcUpstream::DropSlotData(
    const v1::DropSlotDataRequest& request, int64_t deadline_ms) {
  return SlotDataCall<v1::DropSlotDataRequest, v1::DropSlotDataResponse>(
      clock_, deadline_ms, request, [this](auto* context, const auto& r, auto* out) {
        return slot_data_->DropSlotData(context, r, out);
      });
}

absl::StatusOr<v1::ListEffectsResponse> GrpcUpstream::ListEffects(
    const std::string& tenant, const v1::ListEffectsRequest& request, int64_t deadline_ms) {
  grpc::ClientContext context;
  context.set_deadline(WallDeadline(clock_, deadline_ms));
  // The business shows the effects of the tenant the sidecar names, and only those.
  context.AddMetadata(kComponentHeader, kSidecarComponent);
  context.AddMetadata(kTenantHeader, tenant);
  v1::ListEffectsResponse response;
  grpc::Status status = effects_->ListEffects(&context, request, &response);
  if (!status.ok()) return FromGrpcStatus(status, &context);
  return response;
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
  if (IsSlotFenced(status)) {
    // The business's fence is past the epoch this forward carries: it applied nothing,
    // and the answer is no outcome to keep (the next attempt meets the new map).
    reply.kind = ForwardReply::Kind::kNotApplied;
    reply.detail = absl::StrCat("the business refused the slot's write: ", status.error_message());
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
  reply.kind = ProvesNotApplied(status, trailers) ? ForwardReply::Kind::kNotApplied
                                                  : ForwardReply::Kind::kUnknown;
  reply.detail = absl::StrCat("business call ended ", status.error_code(), ": ",
                              status.error_message());
  return reply;
}

bool GrpcUpstream::Connected(int64_t deadline_ms) {
  // A call is only sent on a connected channel, so that "could not connect" proves that
  // nothing was sent. (A connection lost after this check is an unknown outcome.)
  if (channel_->GetState(/*try_to_connect=*/true) == GRPC_CHANNEL_READY) return true;
  const int64_t wait_ms = std::min<int64_t>(kConnectWaitMs, deadline_ms - clock_.NowMs());
  return wait_ms > 0 && channel_->WaitForConnected(WallIn(wait_ms));
}

bool GrpcUpstream::BatchesServed() {
  return clock_.NowMs() >= no_batches_until_ms_.load(std::memory_order_relaxed) &&
         methods_.Listed(kForwardBatchMethod);
}

void GrpcUpstream::Forward(ForwardCall call, std::function<void(ForwardReply)> done) {
  if (batcher_ == nullptr || !BatchesServed()) {
    ForwardOne(std::move(call), std::move(done));
    return;
  }
  const int64_t deadline_ms = call.deadline_ms;
  batcher_->Add(std::move(call), deadline_ms, std::move(done));
}

void GrpcUpstream::ForwardMany(std::vector<ForwardCall> calls, int64_t deadline_ms,
                               Batcher::BatchDone done) {
  if (calls.size() == 1) {
    // Alone: its own call, which follows the caller's cancellation.
    ForwardOne(std::move(calls[0]), [done = std::move(done)](ForwardReply reply) {
      std::vector<ForwardReply> replies;
      replies.push_back(std::move(reply));
      done(std::move(replies));
    });
    return;
  }
  if (!Connected(deadline_ms)) {
    done(std::vector<ForwardReply>(calls.size(), NotConnected()));
    return;
  }
  struct State {
    CallTracker::Ticket ticket;  // first: goes last
    grpc::ClientContext context;
    v1::ForwardBatchRequest request;
    v1::ForwardBatchResponse response;
    std::vector<ForwardCall> calls;  // sent again one by one if the batch was too large
  };
  auto state = std::make_shared<State>();
  if (!calls_.Start(state)) {
    done(std::vector<ForwardReply>(calls.size(), Closed()));
    return;
  }
  state->context.set_deadline(WallDeadline(clock_, deadline_ms));
  state->context.AddMetadata(kComponentHeader, kSidecarComponent);
  state->request.mutable_calls()->Reserve(static_cast<int>(calls.size()));
  for (const ForwardCall& call : calls) *state->request.add_calls() = ForwardedCallOf(call);
  const size_t n = calls.size();
  state->calls = std::move(calls);
  forwards_batched_.fetch_add(n, std::memory_order_relaxed);
  forwards_->async()->ForwardBatch(
      &state->context, &state->request, &state->response,
      [this, state, n, done = std::move(done)](grpc::Status status) {
        if (status.ok()) {
          std::vector<ForwardReply> replies;
          replies.reserve(state->response.outcomes_size());
          for (v1::ForwardOutcome& outcome : *state->response.mutable_outcomes()) {
            replies.push_back(ForwardReplyOf(std::move(outcome)));
          }
          done(std::move(replies));  // a count that does not match: all unknown
          return;
        }
        if (PastMessageLimit(FromGrpcStatus(status, &state->context))) {
          // The batch, or its answer, was past a message limit that each forward and each
          // answer alone fits: each goes again as its own call. A batch refused as it
          // arrived ran nothing; one whose answer could not travel ran each forward once,
          // and the business's inbox answers the second call from the entry it wrote.
          forwards_split_.fetch_add(n, std::memory_order_relaxed);
          SendEachAlone<ForwardCall, ForwardReply>(
              std::move(state->calls),
              [this](ForwardCall call, std::function<void(ForwardReply)> answered) {
                ForwardOne(std::move(call), std::move(answered));
              },
              [done](std::vector<ForwardReply> replies) { done(std::move(replies)); });
          return;
        }
        ForwardReply reply;
        reply.detail = absl::StrCat("batched business call ended ", status.error_code(), ": ",
                                    status.error_message());
        if (status.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
          // No such service: nothing ran. Single calls from now on, for a while.
          no_batches_until_ms_.store(clock_.NowMs() + kBatchRecheckMs, std::memory_order_relaxed);
          reply.kind = ForwardReply::Kind::kNotApplied;
        } else {
          reply.kind = ProvesNotApplied(status, state->context.GetServerTrailingMetadata())
                           ? ForwardReply::Kind::kNotApplied
                           : ForwardReply::Kind::kUnknown;
        }
        done(std::vector<ForwardReply>(n, reply));
      });
}

void GrpcUpstream::ForwardOne(ForwardCall call, std::function<void(ForwardReply)> done) {
  if (!Connected(call.deadline_ms)) {
    done(NotConnected());
    return;
  }
  struct State {
    CallTracker::Ticket ticket;  // first: goes last
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
  if (!calls_.Start(state->ticket,
                    std::shared_ptr<grpc::ClientContext>(state, state->context.get()))) {
    done(Closed());
    return;
  }
  state->context->set_deadline(WallDeadline(clock_, call.deadline_ms));
  state->context->AddMetadata(kComponentHeader, kSidecarComponent);
  state->context->AddMetadata(kCommandIdHeader, call.command_id);
  state->context->AddMetadata(kIdempotencyKeyHeader, call.idempotency_key);
  state->context->AddMetadata(kTenantHeader, call.tenant);
  state->context->AddMetadata(kActorHeader, call.actor);
  state->context->AddMetadata(kFencingTokenHeader, absl::StrCat(call.fencing_token));
  if (!call.entity.empty()) state->context->AddMetadata(kEntityHeader, call.entity);
  if (call.slot_epoch > 0) {
    state->context->AddMetadata(kSlotHeader, absl::StrCat(call.slot));
    state->context->AddMetadata(kSlotEpochHeader, absl::StrCat(call.slot_epoch));
  }
  if (!call.payload_sha256.empty()) {
    state->context->AddMetadata(kPayloadHashHeader, absl::BytesToHexString(call.payload_sha256));
  }
  if (!call.trace.traceparent().empty()) {
    state->context->AddMetadata(kTraceparentHeader, call.trace.traceparent());
    if (!call.trace.tracestate().empty()) {
      state->context->AddMetadata(kTracestateHeader, call.trace.tracestate());
    }
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
    CallTracker::Ticket ticket;  // first: goes last
    grpc::ClientContext context;
    v1::QueryOutcomeRequest request;
    v1::QueryOutcomeResponse response;
  };
  auto state = std::make_shared<State>();
  if (!calls_.Start(state)) {
    done(absl::UnavailableError("the sidecar is shutting down; the outcome was not asked"));
    return;
  }
  state->context.set_deadline(WallDeadline(clock_, deadline_ms));
  state->context.AddMetadata(kComponentHeader, kSidecarComponent);
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
