#include "dedupe_sidecar/doors/sidecar_grpc.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/command/command.h"
#include "common/rpc/grpc_status.h"
#include "common/rpc/owned_request.h"
#include "common/coord/slots.h"
#include "common/base/status.h"
#include "dedupe_sidecar/doors/caller.h"
#include "dedupe_sidecar/sharding/slot_transfer.h"

namespace eonce {
namespace {

// A batch whose answer would be past the message limit: each of its commands was taken
// (answered or refused on its own), and each is answered again from its record.
absl::Status AnswerTooLarge(size_t bytes, size_t max_bytes) {
  return Error(absl::StatusCode::kResourceExhausted, "MESSAGE_TOO_LARGE",
               absl::StrCat("the batch's answer is ", bytes, " bytes, past the message limit of ",
                            max_bytes, "; each of its commands was taken: send them one Submit "
                            "each, and each is answered from its record"));
}

// A command to keep for its call: moved out of a request the handler owns, else copied.
v1::Command TakeCommand(v1::Command* owned, const v1::Command& view) {
  if (owned != nullptr) return std::move(*owned);
  return view;
}

class SidecarServiceImpl : public v1::Sidecar::CallbackService {
 public:
  SidecarServiceImpl(Deduper& deduper, Clock& clock, std::atomic<bool>& draining,
                     Admission& admission, bool identity_from_headers, size_t max_message_bytes)
      : deduper_(deduper),
        clock_(clock),
        draining_(draining),
        admission_(admission),
        identity_from_headers_(identity_from_headers),
        max_message_bytes_(max_message_bytes) {}

  grpc::ServerUnaryReactor* Submit(grpc::CallbackServerContext* context,
                                   const v1::SubmitRequest* request,
                                   v1::SubmitResponse* response) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    if (draining_.load()) {
      reactor->Finish(ToGrpcStatus(Draining(), context));
      return reactor;
    }
    absl::StatusOr<Caller> caller = CallerOf(context, clock_, deduper_);
    if (!caller.ok()) {
      reactor->Finish(ToGrpcStatus(caller.status(), context));
      return reactor;
    }
    // Before anything is written: one tenant's flood must not starve the others.
    absl::StatusOr<Admission::Ticket> admitted = admission_.Admit(caller->tenant);
    if (!admitted.ok()) {
      reactor->Finish(ToGrpcStatus(admitted.status(), context));
      return reactor;
    }
    auto ticket = std::make_shared<Admission::Ticket>(std::move(*admitted));
    // On this callback thread: the Deduper holds a key's lock only while it reads and
    // writes, and waits for no disk (its fsyncs complete on the store's committer thread;
    // a business in this process may sync a quiet store on it: ForwardCall::alone).
    caller->one_command = true;
    // Moved, not copied: nothing reads the request or the caller after this.
    auto* owned = OwnedRequest<v1::SubmitRequest, v1::SubmitResponse>(context, request);
    deduper_.Submit(std::move(*caller),
                    TakeCommand(owned != nullptr ? owned->mutable_command() : nullptr,
                                request->command()),
                    [context, reactor, response,
                     ticket](absl::StatusOr<v1::SubmitResponse> result) {
                      if (result.ok()) *response = std::move(*result);
                      ticket->Release();
                      reactor->Finish(ToGrpcStatus(result.status(), context));
                    });
    return reactor;
  }

  grpc::ServerUnaryReactor* SubmitBatch(grpc::CallbackServerContext* context,
                                        const v1::SubmitBatchRequest* request,
                                        v1::SubmitBatchResponse* response) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    absl::Status refused = BatchSizeRefusal(request->commands_size());
    if (refused.ok() && draining_.load()) refused = Draining();
    absl::StatusOr<Caller> caller = CallerOf(context, clock_, deduper_);
    if (refused.ok() && !caller.ok()) refused = caller.status();
    if (!refused.ok()) {
      reactor->Finish(ToGrpcStatus(refused, context));
      return reactor;
    }
    // Every item exists before the first command starts: an answer may arrive on another
    // thread while later commands are still being started, and each writes only its own.
    const int n = request->commands_size();
    for (int i = 0; i < n; ++i) response->add_items();
    struct Batch {
      std::atomic<int> open;
      grpc::ServerUnaryReactor* reactor;
      grpc::CallbackServerContext* context;
      const v1::SubmitBatchResponse* response;
    };
    auto batch = std::make_shared<Batch>();
    batch->open.store(n);
    batch->reactor = reactor;
    batch->context = context;
    batch->response = response;
    // Each command is moved into its Submit, not copied: nothing reads it after that.
    auto* owned =
        OwnedRequest<v1::SubmitBatchRequest, v1::SubmitBatchResponse>(context, request);
    for (int i = 0; i < n; ++i) {
      v1::SubmitBatchItem* item = response->mutable_items(i);
      auto answer = [this, batch, item](absl::StatusOr<v1::SubmitResponse> result) {
        if (result.ok()) {
          *item->mutable_response() = std::move(*result);
        } else {
          SetStatusParts(result.status(), item);
        }
        if (batch->open.fetch_sub(1, std::memory_order_acq_rel) == 1) {
          // Sent past the limit, the answer would be refused by gRPC, and the caller might
          // hear of it only at its deadline.
          const size_t bytes = batch->response->ByteSizeLong();
          batch->reactor->Finish(
              bytes > max_message_bytes_
                  ? ToGrpcStatus(AnswerTooLarge(bytes, max_message_bytes_), batch->context)
                  : grpc::Status::OK);
        }
      };
      // Each command is admitted on its own, as one Submit would be.
      absl::StatusOr<Admission::Ticket> admitted = admission_.Admit(caller->tenant);
      if (!admitted.ok()) {
        answer(admitted.status());
        continue;
      }
      auto ticket = std::make_shared<Admission::Ticket>(std::move(*admitted));
      deduper_.Submit(*caller,
                      TakeCommand(owned != nullptr ? owned->mutable_commands(i) : nullptr,
                                  request->commands(i)),
                      [answer = std::move(answer), ticket](absl::StatusOr<v1::SubmitResponse> r) {
                        ticket->Release();
                        answer(std::move(r));
                      });
    }
    return reactor;
  }

  grpc::ServerUnaryReactor* Reconcile(grpc::CallbackServerContext* context,
                                      const v1::ReconcileRequest* request,
                                      v1::ReconcileResponse* response) override {
    if (draining_.load()) {
      return FinishUnary<v1::ReconcileResponse>(context, Draining(), response);
    }
    absl::StatusOr<Caller> caller = CallerOf(context, clock_, deduper_);
    if (!caller.ok()) return FinishUnary<v1::ReconcileResponse>(context, caller.status(), response);
    // A lookup reads the store and is audited: it takes a place as a Submit does, so that a
    // flood of them is capped like one of commands. Held until it is answered, at once.
    absl::StatusOr<Admission::Ticket> admitted = admission_.Admit(caller->tenant);
    if (!admitted.ok()) {
      return FinishUnary<v1::ReconcileResponse>(context, admitted.status(), response);
    }
    return FinishUnary(context, deduper_.Reconcile(*caller, *request), response);
  }

  grpc::ServerUnaryReactor* GetInfo(grpc::CallbackServerContext* context,
                                    const v1::GetInfoRequest* /*request*/,
                                    v1::GetInfoResponse* response) override {
    v1::GetInfoResponse info = deduper_.Info();
    info.set_identity_from_headers(identity_from_headers_);
    return FinishUnary(context, absl::StatusOr<v1::GetInfoResponse>(std::move(info)), response);
  }

  grpc::ServerUnaryReactor* GetSlotMap(grpc::CallbackServerContext* context,
                                       const v1::GetSlotMapRequest* /*request*/,
                                       v1::SlotMap* response) override {
    if (deduper_.shards() == nullptr) {
      return FinishUnary<v1::SlotMap>(
          context,
          Error(absl::StatusCode::kNotFound, "NOT_SHARDED",
                "this sidecar is not sharded: it takes every command"),
          response);
    }
    std::shared_ptr<const SlotMap> map = deduper_.shards()->map();
    if (map == nullptr) {
      return FinishUnary<v1::SlotMap>(
          context,
          Error(absl::StatusCode::kUnavailable, "NO_SLOT_MAP",
                "this shard has not read the slot map yet; retry shortly"),
          response);
    }
    return FinishUnary(context, absl::StatusOr<v1::SlotMap>(map->proto()), response);
  }

 private:
  Deduper& deduper_;
  Clock& clock_;
  std::atomic<bool>& draining_;
  Admission& admission_;
  const bool identity_from_headers_;
  const size_t max_message_bytes_;
};

// The longest an operator's read of the business (its effects, an outcome) may take.
constexpr int64_t kOperatorReadMs = 10'000;

class SidecarAdminImpl : public v1::SidecarAdmin::CallbackService {
 public:
  SidecarAdminImpl(Deduper& deduper, RecordStore& records, AuditLog& audit, Clock& clock,
                   WorkPool& pool, Upstream& upstream, Upstream* business)
      : deduper_(deduper),
        records_(records),
        audit_(audit),
        clock_(clock),
        pool_(pool),
        upstream_(upstream) {
    if (business != nullptr) business_.emplace(BusinessSlots{*business, clock});
  }

  grpc::ServerUnaryReactor* ListEffects(grpc::CallbackServerContext* context,
                                        const v1::ListEffectsRequest* request,
                                        v1::ListEffectsResponse* response) override {
    absl::StatusOr<Caller> caller = OperatorOf(context);
    if (!caller.ok()) {
      return FinishUnary<v1::ListEffectsResponse>(context, caller.status(), response);
    }
    // A blocking call to the business: on the work pool, not on a gRPC thread.
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    bool posted = pool_.Post([this, context, request, response, reactor,
                              tenant = caller->tenant, deadline_ms = ReadDeadline(*caller)] {
      absl::StatusOr<v1::ListEffectsResponse> listed =
          upstream_.ListEffects(tenant, *request, deadline_ms);
      if (listed.ok()) *response = std::move(*listed);
      reactor->Finish(ToGrpcStatus(listed.status(), context));
    });
    if (!posted) reactor->Finish(ToGrpcStatus(PoolFull("effect listings"), context));
    return reactor;
  }

  grpc::ServerUnaryReactor* QueryOutcome(grpc::CallbackServerContext* context,
                                         const v1::QueryOutcomeRequest* request,
                                         v1::QueryOutcomeResponse* response) override {
    absl::StatusOr<Caller> caller = OperatorOf(context);
    if (caller.ok() && (request->command_id().empty() ||
                        request->command_id().size() > CommandLimits().max_command_id_bytes)) {
      caller = Error(absl::StatusCode::kInvalidArgument, "INVALID_FIELD",
                     "command_id: 1..128 bytes");
    }
    if (!caller.ok()) {
      return FinishUnary<v1::QueryOutcomeResponse>(context, caller.status(), response);
    }
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    upstream_.QueryOutcome(caller->tenant, request->command_id(), ReadDeadline(*caller),
                           [context, reactor, response](
                               absl::StatusOr<v1::QueryOutcomeResponse> outcome) {
                             if (outcome.ok()) *response = std::move(*outcome);
                             reactor->Finish(ToGrpcStatus(outcome.status(), context));
                           });
    return reactor;
  }

  grpc::ServerUnaryReactor* ListParked(grpc::CallbackServerContext* context,
                                       const v1::ListParkedRequest* request,
                                       v1::ListParkedResponse* response) override {
    absl::StatusOr<Caller> caller = CallerOf(context, clock_, deduper_);
    if (!caller.ok())
      return FinishUnary<v1::ListParkedResponse>(context, caller.status(), response);
    return FinishUnary(context, deduper_.ListParked(*caller, request->limit()), response);
  }

  grpc::ServerUnaryReactor* QueryAudit(grpc::CallbackServerContext* context,
                                       const v1::QueryAuditRequest* request,
                                       v1::QueryAuditResponse* response) override {
    absl::StatusOr<Caller> caller = CallerOf(context, clock_, deduper_);
    if (caller.ok()) {
      if (absl::Status allowed = deduper_.RequireOperator(*caller); !allowed.ok()) caller = allowed;
    }
    if (!caller.ok()) {
      return FinishUnary<v1::QueryAuditResponse>(context, caller.status(), response);
    }
    // The query waits for the audit writer (read your writes) and reads the store: on the
    // work pool, not on a gRPC thread.
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    bool posted = pool_.Post([this, context, request, response, reactor,
                              tenant = caller->tenant] {
      absl::StatusOr<std::vector<v1::AuditEvent>> events = audit_.Query(tenant, *request);
      if (events.ok()) {
        for (auto& event : *events) *response->add_events() = std::move(event);
      }
      reactor->Finish(ToGrpcStatus(events.status(), context));
    });
    if (!posted) reactor->Finish(ToGrpcStatus(PoolFull("audit queries"), context));
    return reactor;
  }

  grpc::ServerUnaryReactor* VerifyAudit(grpc::CallbackServerContext* context,
                                        const v1::VerifyAuditRequest* request,
                                        v1::VerifyAuditResponse* response) override {
    // The check walks the whole chain, every tenant's events, and answers whether it holds
    // and how long it is: how busy every tenant has been. A platform operator's call.
    absl::StatusOr<Caller> caller = CallerOf(context, clock_, deduper_);
    if (caller.ok()) {
      if (absl::Status allowed = deduper_.RequirePlatformOperator(*caller); !allowed.ok()) {
        caller = allowed;
      }
    }
    if (!caller.ok())
      return FinishUnary<v1::VerifyAuditResponse>(context, caller.status(), response);
    // A long scan: on the work pool, not on a gRPC thread, and bounded per call.
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    bool posted = pool_.Post([this, context, request, response, reactor] {
      absl::StatusOr<v1::VerifyAuditResponse> result =
          audit_.Verify(request->after_seq(), request->max_events());
      if (result.ok()) *response = std::move(*result);
      reactor->Finish(ToGrpcStatus(result.status(), context));
    });
    if (!posted) {
      reactor->Finish(ToGrpcStatus(PoolFull("audit verifications"), context));
    }
    return reactor;
  }

  grpc::ServerUnaryReactor* AdoptSlotMap(grpc::CallbackServerContext* context,
                                         const v1::AdoptSlotMapRequest* request,
                                         v1::AdoptSlotMapResponse* response) override {
    // The wait for the moved slots' work blocks: on the work pool.
    return PlatformCall(
        context, response, "slot map adoptions",
        [request](ShardGate& shards, v1::AdoptSlotMapResponse* out) -> absl::Status {
          absl::StatusOr<SlotMap> map = SlotMap::FromProto(request->map());
          if (!map.ok()) return map.status();
          // The push says which epoch to reach; the map itself comes from the store.
          absl::StatusOr<uint64_t> held =
              shards.AdoptFromStore(map->epoch(), request->drain_timeout_ms());
          if (held.ok()) out->set_epoch(*held);
          return held.status();
        });
  }

  grpc::ServerUnaryReactor* ExportSlots(grpc::CallbackServerContext* context,
                                        const v1::ExportSlotsRequest* request,
                                        v1::ExportSlotsResponse* response) override {
    return PlatformCall(context, response, "slot exports",
                        [this, request](ShardGate& shards, v1::ExportSlotsResponse* out) {
                          return Into(eonce::ExportSlots(shards, records_, *request, Business()), out);
                        });
  }

  grpc::ServerUnaryReactor* ImportSlots(grpc::CallbackServerContext* context,
                                        const v1::ImportSlotsRequest* request,
                                        v1::ImportSlotsResponse* response) override {
    return PlatformCall(context, response, "slot imports",
                        [this, request](ShardGate& shards, v1::ImportSlotsResponse* out) {
                          return Into(eonce::ImportSlots(shards, records_, *request, Business()), out);
                        });
  }

  grpc::ServerUnaryReactor* DropSlots(grpc::CallbackServerContext* context,
                                      const v1::DropSlotsRequest* request,
                                      v1::DropSlotsResponse* response) override {
    return PlatformCall(context, response, "slot drops",
                        [this, request](ShardGate& shards, v1::DropSlotsResponse* out) {
                          return Into(eonce::DropSlots(shards, records_, *request, Business()), out);
                        });
  }

  grpc::ServerUnaryReactor* ResolveParked(grpc::CallbackServerContext* context,
                                          const v1::ResolveParkedRequest* request,
                                          v1::ResolveParkedResponse* response) override {
    absl::StatusOr<Caller> caller = CallerOf(context, clock_, deduper_);
    if (!caller.ok()) {
      return FinishUnary<v1::ResolveParkedResponse>(context, caller.status(), response);
    }
    return FinishUnary(context, deduper_.ResolveParked(*caller, *request), response);
  }

 private:
  // The caller, if it is an operator the policy names for its tenant.
  absl::StatusOr<Caller> OperatorOf(grpc::CallbackServerContext* context) {
    absl::StatusOr<Caller> caller = CallerOf(context, clock_, deduper_);
    if (!caller.ok()) return caller;
    EONCE_RETURN_IF_ERROR(deduper_.RequireOperator(*caller));
    return caller;
  }

  // An operator's read of the business ends by the caller's deadline, and within
  // kOperatorReadMs.
  int64_t ReadDeadline(const Caller& caller) {
    const int64_t bound = clock_.NowMs() + kOperatorReadMs;
    return caller.deadline_ms > 0 ? std::min(caller.deadline_ms, bound) : bound;
  }

  // Moves `result` into `*out`; its status.
  template <typename Response>
  static absl::Status Into(absl::StatusOr<Response> result, Response* out) {
    if (result.ok()) *out = std::move(*result);
    return result.status();
  }

  // A platform operator's call on a sharded sidecar, run on the work pool (each scans or
  // waits): `work(shards, response)` gives the status to answer.
  template <typename Response, typename Work>
  grpc::ServerUnaryReactor* PlatformCall(grpc::CallbackServerContext* context,
                                         Response* response, const char* what, Work work) {
    absl::StatusOr<Caller> caller = CallerOf(context, clock_, deduper_);
    if (caller.ok()) {
      if (absl::Status allowed = deduper_.RequirePlatformOperator(*caller); !allowed.ok()) {
        caller = allowed;
      }
    }
    if (!caller.ok()) return FinishUnary<Response>(context, caller.status(), response);
    ShardGate* shards = deduper_.shards();
    if (shards == nullptr) {
      return FinishUnary<Response>(
          context,
          Error(absl::StatusCode::kFailedPrecondition, "NOT_SHARDED",
                "this sidecar is not sharded (start it with --shard_id and --etcd_endpoints)"),
          response);
    }
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    bool posted = pool_.Post([shards, context, response, reactor, work = std::move(work)] {
      absl::Status status = work(*shards, response);
      reactor->Finish(ToGrpcStatus(status, context));
    });
    if (!posted) reactor->Finish(ToGrpcStatus(PoolFull(what), context));
    return reactor;
  }

  BusinessSlots* Business() { return business_.has_value() ? &*business_ : nullptr; }

  Deduper& deduper_;
  RecordStore& records_;
  AuditLog& audit_;
  Clock& clock_;
  WorkPool& pool_;
  Upstream& upstream_;  // the business, for the operator's reads of it
  std::optional<BusinessSlots> business_;
};

}  // namespace

std::unique_ptr<v1::Sidecar::CallbackService> NewSidecarService(Deduper& deduper, Clock& clock,
                                                                std::atomic<bool>& draining,
                                                                Admission& admission,
                                                                bool identity_from_headers,
                                                                int max_message_bytes) {
  return std::make_unique<SidecarServiceImpl>(deduper, clock, draining, admission,
                                              identity_from_headers,
                                              static_cast<size_t>(max_message_bytes));
}

std::unique_ptr<v1::SidecarAdmin::CallbackService> NewSidecarAdminService(
    Deduper& deduper, RecordStore& records, AuditLog& audit, Clock& clock, WorkPool& pool,
    Upstream& upstream, Upstream* business) {
  return std::make_unique<SidecarAdminImpl>(deduper, records, audit, clock, pool, upstream,
                                            business);
}

}  // namespace eonce
