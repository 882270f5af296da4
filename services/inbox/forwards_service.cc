#include "services/inbox/forwards_service.h"

#include <atomic>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/rpc/grpc_status.h"
#include "common/base/status.h"

namespace eonce {
namespace {

absl::Status CheckBatch(const v1::ForwardBatchRequest& request) {
  if (request.calls_size() == 0 || request.calls_size() > ForwardsServiceImpl::kMaxCalls) {
    return Error(absl::StatusCode::kInvalidArgument, "BATCH_SIZE",
                 absl::StrCat("a batch holds 1 to ", ForwardsServiceImpl::kMaxCalls,
                              " forwards; this one holds ", request.calls_size(),
                              "; nothing was run"));
  }
  for (int i = 0; i < request.calls_size(); ++i) {
    const v1::ForwardedCall& call = request.calls(i);
    if (!call.payload_sha256().empty() && call.payload_sha256().size() != 32) {
      return Error(absl::StatusCode::kInvalidArgument, "INVALID_PAYLOAD_HASH",
                   absl::StrCat("forward ", i, ": a payload hash is 32 bytes, not ",
                                call.payload_sha256().size(), "; nothing was run"));
    }
    if (call.method().empty()) {
      return Error(absl::StatusCode::kInvalidArgument, "INVALID_METHOD",
                   absl::StrCat("forward ", i, " names no method; nothing was run"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

grpc::ServerUnaryReactor* ForwardsServiceImpl::ForwardBatch(
    grpc::CallbackServerContext* context, const v1::ForwardBatchRequest* request,
    v1::ForwardBatchResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (absl::Status checked = CheckBatch(*request); !checked.ok()) {
    reactor->Finish(ToGrpcStatus(checked, context));
    return reactor;
  }
  const int n = request->calls_size();
  for (int i = 0; i < n; ++i) response->add_outcomes();
  // Each item's answer lands in its own slot of the response, possibly on the store's
  // committer thread; the last one finishes the call.
  auto left = std::make_shared<std::atomic<int>>(n);
  for (int i = 0; i < n; ++i) {
    upstream_.Forward(ForwardCallOf(request->calls(i)),
                      [reactor, response, left, i](ForwardReply reply) {
                        *response->mutable_outcomes(i) = ForwardOutcomeOf(std::move(reply));
                        if (left->fetch_sub(1, std::memory_order_acq_rel) == 1) {
                          reactor->Finish(grpc::Status::OK);
                        }
                      });
  }
  return reactor;
}

}  // namespace eonce
