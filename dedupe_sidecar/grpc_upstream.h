// GrpcUpstream: the business service over gRPC, through a generic stub, so that any unary
// gRPC service can sit behind the sidecar unchanged.
//
// The forward carries the command's identity as metadata and follows the caller's
// cancellation. The channel reconnects quickly (at most a second of backoff), because a
// business container restarting in the same pod is the common case. Thread-safe.
#ifndef EONCE_DEDUPE_SIDECAR_GRPC_UPSTREAM_H_
#define EONCE_DEDUPE_SIDECAR_GRPC_UPSTREAM_H_

#include <memory>
#include <string>

#include "common/clock.h"
#include "common/tls.h"
#include "dedupe_sidecar/method_catalog.h"
#include "dedupe_sidecar/upstream.h"
#include "eonce/v1/outcome.grpc.pb.h"
#include "grpcpp/channel.h"
#include "grpcpp/generic/generic_stub.h"

namespace eonce {

class GrpcUpstream : public Upstream {
 public:
  // `address` is "host:port" or "unix:/path".
  GrpcUpstream(const std::string& address, const TlsFiles& tls, Clock& clock,
               int max_message_bytes);

  void Forward(ForwardCall call, std::function<void(ForwardReply)> done) override;
  void QueryOutcome(const std::string& tenant, const std::string& command_id,
                    int64_t deadline_ms,
                    std::function<void(absl::StatusOr<v1::QueryOutcomeResponse>)> done) override;
  bool Reachable() override;
  std::optional<bool> Implements(const std::string& method) override {
    return methods_.Implements(method);
  }
  absl::StatusOr<v1::ExportSlotDataResponse> ExportSlotData(
      const v1::ExportSlotDataRequest& request, int64_t deadline_ms) override;
  absl::StatusOr<v1::ImportSlotDataResponse> ImportSlotData(
      const v1::ImportSlotDataRequest& request, int64_t deadline_ms) override;
  absl::StatusOr<v1::DropSlotDataResponse> DropSlotData(const v1::DropSlotDataRequest& request,
                                                        int64_t deadline_ms) override;

  // How a finished call's status is classified (exposed for tests).
  static ForwardReply Classify(const grpc::Status& status, const std::string& response,
                               const std::multimap<grpc::string_ref, grpc::string_ref>& trailers);

 private:
  Clock& clock_;
  std::shared_ptr<grpc::Channel> channel_;
  grpc::GenericStub generic_;
  std::unique_ptr<v1::Outcome::Stub> outcome_;
  std::unique_ptr<v1::SlotData::Stub> slot_data_;
  MethodCatalog methods_;
};

}  // namespace eonce

#endif  // EONCE_DEDUPE_SIDECAR_GRPC_UPSTREAM_H_
