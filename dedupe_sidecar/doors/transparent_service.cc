#include "dedupe_sidecar/doors/transparent_service.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/command/command.h"
#include "common/rpc/grpc_status.h"
#include "common/base/log.h"
#include "common/rpc/metadata.h"
#include "common/base/status.h"
#include "dedupe_sidecar/doors/caller.h"
#include "dedupe_sidecar/doors/transparent_call.h"
#include "grpcpp/support/byte_buffer.h"

namespace eonce {

namespace {

constexpr char kReplayedHeader[] = "eonce-replayed";
constexpr char kFirstSeenHeader[] = "eonce-first-seen-ms";

class TransparentReactor : public grpc::ServerGenericBidiReactor {
 public:
  TransparentReactor(grpc::GenericCallbackServerContext* context, Deduper& deduper,
                     Upstream& upstream, PolicyStore& policy, Clock& clock, bool refuse_unkeyed,
                     int64_t forward_timeout_ms, bool draining, Admission& admission)
      : context_(context),
        deduper_(deduper),
        upstream_(upstream),
        policy_(policy),
        clock_(clock),
        admission_(admission),
        refuse_unkeyed_(refuse_unkeyed),
        forward_timeout_ms_(forward_timeout_ms) {
    if (draining) {
      Finish(ToGrpcStatus(Draining(), context_));
      return;
    }
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      Finish(ToGrpcStatus(
          Error(absl::StatusCode::kInvalidArgument, "NO_REQUEST", "no request message"),
          context_));
      return;
    }
    std::vector<grpc::Slice> slices;
    std::string bytes;
    if (request_.Dump(&slices).ok()) {
      for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
    const std::string method = context_->method();
    // eonce's services and gRPC's are never forwarded, whoever asks (no secret: every
    // caller knows them). Whether the business has the method is told only to a caller
    // whose identity (and, for a read, the policy) let it in.
    if (IsReservedMethod(method)) {
      deduper_.CountDenied();
      Finish(ToGrpcStatus(CommandMethodRefusal(MethodKnown::kCannotTell, method), context_));
      return;
    }
    const std::string key = RequestMetadata(*context_, kTransparentKeyHeader);
    if (key.empty()) {
      // Fails closed: without a key, only a method the policy lists readonly goes on.
      if (refuse_unkeyed_ && !policy_.IsReadOnly(method)) {
        Finish(ToGrpcStatus(
            Error(absl::StatusCode::kFailedPrecondition, "IDEMPOTENCY_KEY_REQUIRED",
                  absl::StrCat(method.substr(0, 256),
                               " is not listed readonly in the sidecar's policy: send an "
                               "idempotency-key header")),
            context_));
        return;
      }
      PassThrough(method, std::move(bytes));
      return;
    }
    v1::Command command = TransparentCommand(
        method, key, RequestMetadata(*context_, kCommandIdHeader), std::move(bytes));
    absl::StatusOr<Caller> caller = CallerOf(context_, clock_, deduper_);
    if (!caller.ok()) {
      Finish(ToGrpcStatus(caller.status(), context_));
      return;
    }
    // A caller without a tenant is refused by the Deduper before anything else.
    if (!caller->tenant.empty()) {
      if (absl::Status forwardable = Forwardable(method); !forwardable.ok()) {
        Finish(ToGrpcStatus(forwardable, context_));
        return;
      }
    }
    if (!Admit(caller->tenant)) return;
    // Moved, not copied (the request's bytes with it): nothing reads them after this.
    deduper_.Submit(std::move(*caller), std::move(command),
                    [this](absl::StatusOr<v1::SubmitResponse> result) {
                      if (!result.ok()) {
                        Finish(ToGrpcStatus(result.status(), context_));
                        return;
                      }
                      if (result->disposition() == v1::REPLAYED) {
                        context_->AddInitialMetadata(kReplayedHeader, "true");
                        context_->AddInitialMetadata(
                            kFirstSeenHeader, absl::StrCat(result->replay().first_seen_ms()));
                      }
                      Answer(result->result());
                    });
  }

  void OnWriteDone(bool /*ok*/) override {}
  void OnDone() override { delete this; }

 private:
  void Answer(const v1::CallResult& result) {
    if (result.code() != 0) {
      Finish(StatusOfResult(result));
      return;
    }
    grpc::Slice slice(result.response());
    response_ = grpc::ByteBuffer(&slice, 1);
    StartWriteAndFinish(&response_, grpc::WriteOptions(), grpc::Status::OK);
  }

  void PassThrough(const std::string& method, std::string bytes) {
    ForwardCall call;
    call.method = method;
    call.request = std::move(bytes);
    absl::StatusOr<Caller> caller = CallerOf(context_, clock_, deduper_);
    if (!caller.ok()) {
      Finish(ToGrpcStatus(caller.status(), context_));
      return;
    }
    if (caller->tenant.empty()) {
      deduper_.CountDenied();
      Finish(ToGrpcStatus(Error(absl::StatusCode::kUnauthenticated, "NO_IDENTITY",
                                "the caller has no tenant (client certificate or eonce-tenant)"),
                          context_));
      return;
    }
    // The same policy as for commands: a read is a call like any other.
    const std::string& actor = EffectiveActor(caller->workload, caller->actor);
    PolicyDecision decision =
        policy_.Check(caller->tenant, caller->workload, actor, method,
                      caller->certificate_epoch.value_or(caller->credential_epoch));
    if (!decision.allowed) {
      deduper_.CountDenied();
      LogWarn("pass-through refused", {{"tenant", caller->tenant},
                                       {"workload", caller->workload},
                                       {"actor", actor},
                                       {"operation", method.substr(0, 256)},
                                       {"reason", decision.reason}});
      Finish(ToGrpcStatus(Error(absl::StatusCode::kPermissionDenied, decision.reason,
                                absl::StrCat("not allowed: ", decision.reason)),
                          context_));
      return;
    }
    if (absl::Status forwardable = Forwardable(method); !forwardable.ok()) {
      Finish(ToGrpcStatus(forwardable, context_));
      return;
    }
    if (!Admit(caller->tenant)) return;
    call.tenant = caller->tenant;
    call.actor = actor;
    call.trace = caller->trace;  // passed through as the caller sent it (once checked)
    call.deadline_ms = clock_.NowMs() + forward_timeout_ms_;
    upstream_.Forward(std::move(call), [this](ForwardReply reply) {
      if (reply.kind == ForwardReply::Kind::kAnswered ||
          reply.kind == ForwardReply::Kind::kRefused) {
        Answer(reply.result);
      } else {
        Finish(ToGrpcStatus(
            Error(absl::StatusCode::kUnavailable, "UPSTREAM_UNAVAILABLE", reply.detail),
            context_));
      }
    });
  }

  // Only the business's own methods go on, as the catalog it serves by reflection lists
  // them (an allowlist: a service added to the business tomorrow is not reachable through
  // the sidecar unless it is the business's own). eonce's services (the business's
  // outbox, data by slot, batched forwards, effects, outcomes) and gRPC's (health,
  // reflection) never get here (OnReadDone refuses them whatever the catalog says): an
  // operator reads effects and outcomes through SidecarAdmin.
  absl::Status Forwardable(const std::string& method) {
    const MethodKnown known = upstream_.Knows(method);
    switch (known) {
      case MethodKnown::kServed:
        return absl::OkStatus();
      case MethodKnown::kNotYetKnown:
        return CommandMethodRefusal(known, method);  // UNAVAILABLE: come back
      case MethodKnown::kNotServed:
      case MethodKnown::kCannotTell:
        break;
    }
    return Error(absl::StatusCode::kUnimplemented, "UNKNOWN_METHOD",
                 absl::StrCat(absl::string_view(method).substr(0, 256),
                              " is not a method the business's catalog (server reflection) "
                              "lists; transparent mode forwards only those"));
  }

  // Takes a place for this call (kept until the reactor is done), or answers the refusal.
  bool Admit(const std::string& tenant) {
    absl::StatusOr<Admission::Ticket> admitted = admission_.Admit(tenant);
    if (!admitted.ok()) {
      Finish(ToGrpcStatus(admitted.status(), context_));
      return false;
    }
    ticket_ = std::move(*admitted);
    return true;
  }

  grpc::GenericCallbackServerContext* context_;
  Deduper& deduper_;
  Upstream& upstream_;
  PolicyStore& policy_;
  Clock& clock_;
  Admission& admission_;
  Admission::Ticket ticket_;
  const bool refuse_unkeyed_;
  const int64_t forward_timeout_ms_;
  grpc::ByteBuffer request_;
  grpc::ByteBuffer response_;
};

}  // namespace

grpc::ServerGenericBidiReactor* TransparentService::CreateReactor(
    grpc::GenericCallbackServerContext* context) {
  return new TransparentReactor(context, deduper_, upstream_, policy_, clock_, refuse_unkeyed_,
                                forward_timeout_ms_, draining_.load(), admission_);
}

}  // namespace eonce
