#include "outbox_agent/doors/relay.h"

#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "common/command/command.h"
#include "common/rpc/grpc_status.h"
#include "common/base/log.h"
#include "common/command/trace_context.h"
#include "eonce/v1/outcome.grpc.pb.h"
#include "grpcpp/client_context.h"

namespace eonce {
namespace {

class GrpcFollowUpSource : public FollowUpSource {
 public:
  GrpcFollowUpSource(const std::string& address, std::string tenant, const TlsFiles& tls,
                     Clock& clock, int64_t timeout_ms)
      : stub_(v1::FollowUps::NewStub(NewChannel(address, tls, 8 << 20))),
        tenant_(std::move(tenant)),
        clock_(clock),
        timeout_ms_(timeout_ms) {}

  absl::StatusOr<v1::PullFollowUpsResponse> Pull(int limit) override {
    grpc::ClientContext context;
    Prepare(&context);
    v1::PullFollowUpsRequest request;
    request.set_limit(limit);
    v1::PullFollowUpsResponse response;
    grpc::Status status = stub_->PullFollowUps(&context, request, &response);
    if (!status.ok()) return FromGrpcStatus(status, &context);
    return response;
  }

  absl::Status Ack(const std::vector<std::string>& ids) override {
    grpc::ClientContext context;
    Prepare(&context);
    v1::AckFollowUpsRequest request;
    for (const std::string& id : ids) request.add_ids(id);
    v1::AckFollowUpsResponse response;
    grpc::Status status = stub_->AckFollowUps(&context, request, &response);
    return status.ok() ? absl::OkStatus() : FromGrpcStatus(status, &context);
  }

 private:
  void Prepare(grpc::ClientContext* context) {
    context->set_deadline(WallDeadline(clock_, clock_.NowMs() + timeout_ms_));
    // The business admits eonce components: the relay reads its outbox for any tenant.
    context->AddMetadata(kComponentHeader, kRelayComponent);
    context->AddMetadata(kTenantHeader, tenant_);
  }

  std::unique_ptr<v1::FollowUps::Stub> stub_;
  const std::string tenant_;
  Clock& clock_;
  const int64_t timeout_ms_;
};

}  // namespace

std::unique_ptr<FollowUpSource> NewGrpcFollowUpSource(const std::string& address,
                                                      const std::string& tenant,
                                                      const TlsFiles& tls, Clock& clock,
                                                      int64_t timeout_ms) {
  return std::make_unique<GrpcFollowUpSource>(address, tenant, tls, clock, timeout_ms);
}

absl::StatusOr<int> FollowUpRelay::RelayOnce() {
  absl::StatusOr<v1::PullFollowUpsResponse> page = source_.Pull(kPageSize);
  if (!page.ok()) return page.status();
  // All of the page at once, so that its records share the outbox's fsyncs.
  const int n = page->follow_ups_size();
  std::vector<absl::Status> results(n);
  absl::BlockingCounter pending(n);
  for (int i = 0; i < n; ++i) {
    outbox_.Enqueue(page->follow_ups(i).command(),
                    [&results, &pending, i](absl::StatusOr<v1::EnqueueResponse> enqueued) {
                      results[i] = enqueued.status();
                      pending.DecrementCount();
                    });
  }
  pending.Wait();
  std::vector<std::string> held;
  absl::Status first_error;
  for (int i = 0; i < n; ++i) {
    if (!results[i].ok()) {
      // Not acknowledged, so pulled again next round; a command this agent can never take
      // (invalid, or its id taken by another payload) is logged each time.
      LogError("follow-up not taken into the outbox",
               WithTrace({{"command_id", page->follow_ups(i).command().command_id()},
                          {"error", std::string(results[i].message())}},
                         page->follow_ups(i).command().trace()));
      if (first_error.ok()) first_error = results[i];
      continue;
    }
    held.push_back(page->follow_ups(i).id());
  }
  if (!held.empty()) {
    if (absl::Status acked = source_.Ack(held); !acked.ok()) return acked;
    relayed_ += static_cast<int64_t>(held.size());
  }
  if (held.empty() && !first_error.ok()) return first_error;
  return static_cast<int>(held.size());
}

}  // namespace eonce
