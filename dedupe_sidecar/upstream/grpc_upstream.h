// GrpcUpstream: the business service over gRPC, through a generic stub, so that any unary
// gRPC service can sit behind the sidecar unchanged.
//
// The forward carries the command's identity as metadata and follows the caller's
// cancellation. The channel reconnects quickly (at most a second of backoff), because a
// business container restarting in the same pod is the common case. Thread-safe.
//
// Batched forwards: when the business serves eonce.v1.Forwards (its reflection catalog
// lists ForwardBatch) and `batch_calls` > 0, a forward goes at once as its own call while
// fewer than `batch_calls` calls are in flight; the forwards that arrive meanwhile go
// together in one ForwardBatch call (a CallBatcher, at most 64 each), whose deadline is
// the earliest of theirs. A forward in a batch does not follow its caller's cancellation
// (its deadline still holds). A batch call that fails leaves each of its forwards'
// outcomes unknown, unless it proves that nothing ran (UNIMPLEMENTED: the business no
// longer serves batches, and none is sent to it for kBatchRecheckMs; or the
// `eonce-not-applied` trailer).
#ifndef EONCE_DEDUPE_SIDECAR_UPSTREAM_GRPC_UPSTREAM_H_
#define EONCE_DEDUPE_SIDECAR_UPSTREAM_GRPC_UPSTREAM_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "common/rpc/call_batcher.h"
#include "common/rpc/call_tracker.h"
#include "common/base/clock.h"
#include "common/rpc/tls.h"
#include "dedupe_sidecar/upstream/method_catalog.h"
#include "dedupe_sidecar/upstream/upstream.h"
#include "eonce/v1/outcome.grpc.pb.h"
#include "grpcpp/channel.h"
#include "grpcpp/generic/generic_stub.h"

namespace eonce {

class GrpcUpstream : public Upstream {
 public:
  // `address` is "host:port" or "unix:/path".
  static constexpr int64_t kBatchRecheckMs = 60'000;

  // `catalog_timeout_ms`: the longest each call of a read of the business's catalog may
  // take (MethodCatalog); the read runs on a thread of its own.
  GrpcUpstream(const std::string& address, const TlsFiles& tls, Clock& clock,
               int max_message_bytes, int batch_calls = 0,
               int64_t catalog_timeout_ms = MethodCatalog::kRefreshTimeoutMs);
  ~GrpcUpstream() override;  // Close()s

  // Cancels the calls in flight and waits until each one's callback has run and its state
  // (which owns a reference to the channel) is gone; later forwards are answered at once
  // as not applied. A server shutting down calls it before its store closes, so that a
  // late answer still finds the store, and no channel reference outlives the upstream on
  // one of gRPC's threads (common/rpc/call_tracker.h). The catalog's reads end too.
  void Close() {
    methods_.Stop();
    calls_.CloseAndWait();
  }
  // Waits (at most `limit`) until the read of the business's catalog that is due or under
  // way has ended: a server's start calls it so that its first commands find the catalog.
  // Never on a callback thread.
  bool AwaitCatalog(absl::Duration limit) { return methods_.AwaitSettled(limit); }

  void Forward(ForwardCall call, std::function<void(ForwardReply)> done) override;
  void QueryOutcome(const std::string& tenant, const std::string& command_id,
                    int64_t deadline_ms,
                    std::function<void(absl::StatusOr<v1::QueryOutcomeResponse>)> done) override;
  bool Reachable() override;
  MethodKnown Knows(const std::string& method) override { return methods_.Knows(method); }
  absl::StatusOr<v1::ExportSlotDataResponse> ExportSlotData(
      const v1::ExportSlotDataRequest& request, int64_t deadline_ms) override;
  absl::StatusOr<v1::ImportSlotDataResponse> ImportSlotData(
      const v1::ImportSlotDataRequest& request, int64_t deadline_ms) override;
  absl::StatusOr<v1::HoldSlotDataResponse> HoldSlotData(const v1::HoldSlotDataRequest& request,
                                                        int64_t deadline_ms) override;
  absl::StatusOr<v1::DropSlotDataResponse> DropSlotData(const v1::DropSlotDataRequest& request,
                                                        int64_t deadline_ms) override;
  absl::StatusOr<v1::ListEffectsResponse> ListEffects(const std::string& tenant,
                                                      const v1::ListEffectsRequest& request,
                                                      int64_t deadline_ms) override;

  // Forwards sent inside ForwardBatch calls so far.
  uint64_t forwards_batched() const { return forwards_batched_.load(std::memory_order_relaxed); }
  // Of those, forwards sent again one call each because their batch, or its answer, was
  // past a message limit.
  uint64_t forwards_split() const { return forwards_split_.load(std::memory_order_relaxed); }

  // How a finished call's status is classified (exposed for tests).
  static ForwardReply Classify(const grpc::Status& status, const std::string& response,
                               const std::multimap<grpc::string_ref, grpc::string_ref>& trailers);

 private:
  using Batcher = CallBatcher<ForwardCall, ForwardReply>;
  // Waits for a connection until `deadline_ms` (at most kConnectWaitMs); false: none, and
  // nothing may be sent.
  bool Connected(int64_t deadline_ms);
  void ForwardOne(ForwardCall call, std::function<void(ForwardReply)> done);
  void ForwardMany(std::vector<ForwardCall> calls, int64_t deadline_ms, Batcher::BatchDone done);
  bool BatchesServed();

  Clock& clock_;
  std::shared_ptr<grpc::Channel> channel_;
  grpc::GenericStub generic_;
  std::unique_ptr<v1::Outcome::Stub> outcome_;
  std::unique_ptr<v1::SlotData::Stub> slot_data_;
  std::unique_ptr<v1::Forwards::Stub> forwards_;
  std::unique_ptr<v1::Effects::Stub> effects_;
  MethodCatalog methods_;
  // No batches before this time: the business said it serves none.
  std::atomic<int64_t> no_batches_until_ms_{0};
  std::atomic<uint64_t> forwards_batched_{0};
  std::atomic<uint64_t> forwards_split_{0};
  std::unique_ptr<Batcher> batcher_;  // null: every forward is its own call
  CallTracker calls_;  // each call's state holds a ticket, before its ClientContext
};

}  // namespace eonce

#endif  // EONCE_DEDUPE_SIDECAR_UPSTREAM_GRPC_UPSTREAM_H_
