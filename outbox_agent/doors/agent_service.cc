#include "outbox_agent/doors/agent_service.h"

#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/command/command.h"
#include "common/rpc/grpc_status.h"
#include "common/base/log.h"
#include "common/rpc/metadata.h"
#include "common/base/status.h"
#include "common/rpc/tls.h"
#include "common/command/trace_context.h"

namespace eonce {
namespace {

// The largest List page, in record bytes.
constexpr size_t kMaxListBytes = 1 << 20;

absl::StatusOr<OutboxRecord> Found(absl::StatusOr<std::optional<OutboxRecord>> record,
                                   const std::string& id) {
  if (!record.ok()) return record.status();
  if (!record->has_value()) {
    return Error(absl::StatusCode::kNotFound, "NO_SUCH_COMMAND", absl::StrCat("no record ", id));
  }
  return std::move(**record);
}

// The call's traceparent/tracestate metadata, for a command that names no trace of its
// own (the field wins). Checked and counted, like the field, by Outbox::Enqueue.
void TakeTraceFromMetadata(const grpc::CallbackServerContext& context, v1::Command* command) {
  if (!command->trace().traceparent().empty()) return;
  std::string traceparent = RequestMetadata(context, kTraceparentHeader);
  if (traceparent.empty()) return;
  command->mutable_trace()->set_traceparent(std::move(traceparent));
  command->mutable_trace()->set_tracestate(RequestMetadata(context, kTracestateHeader));
}

// One Watch stream. The feed wakes it through a weak pointer and under the stream's own
// mutex, so a notice that races the stream's end finds nothing to call. StartWrite is
// called under that mutex (its completion never runs inline); Finish is not, because
// OnDone may follow it at once.
class WatchReactor : public grpc::ServerWriteReactor<v1::WatchEvent> {
 public:
  WatchReactor(StateFeed& feed, StateFeed::StateSet states)
      : feed_(feed), shared_(std::make_shared<Shared>()) {
    shared_->reactor = this;
    std::weak_ptr<Shared> weak = shared_;
    subscription_ = feed_.Subscribe([weak] {
      auto shared = weak.lock();
      if (shared == nullptr) return;
      WatchReactor* reactor = nullptr;
      bool finish = false;
      {
        absl::MutexLock lock(&shared->mu);
        reactor = shared->reactor;
        if (reactor != nullptr) finish = reactor->MaybeWriteLocked();
      }
      if (finish) reactor->FinishCutOff();
    }, states);
    if (subscription_ == nullptr) {
      {
        absl::MutexLock lock(&shared_->mu);
        finished_ = true;
      }
      Finish(ToGrpcStatus(WithRetryAfter(Error(absl::StatusCode::kResourceExhausted,
                                               "TOO_MANY_WATCHERS", "too many watchers"),
                                         1'000),
                          nullptr));
      return;
    }
    // The headers say "subscribed": a client that waits for them before it reads the
    // store misses no change after that read.
    StartSendInitialMetadata();
    MaybeWrite();
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      // The client went away. A server reactor must still call Finish, once, or OnDone
      // never comes and the server's Shutdown waits for this stream forever; OnCancel
      // may come before or after this, and whichever sees the stream unfinished ends it.
      bool finish = false;
      {
        absl::MutexLock lock(&shared_->mu);
        writing_ = false;
        if (!finished_) finish = finished_ = true;
      }
      if (finish) Finish(grpc::Status::CANCELLED);
      return;
    }
    {
      absl::MutexLock lock(&shared_->mu);
      writing_ = false;
    }
    MaybeWrite();
  }

  void OnCancel() override {
    bool finish = false;
    {
      absl::MutexLock lock(&shared_->mu);
      if (!finished_) finish = finished_ = true;
    }
    if (finish) Finish(grpc::Status::CANCELLED);
  }

  void OnDone() override {
    {
      absl::MutexLock lock(&shared_->mu);
      shared_->reactor = nullptr;
    }
    if (subscription_ != nullptr) feed_.Unsubscribe(subscription_);
    delete this;
  }

 private:
  struct Shared {
    absl::Mutex mu;
    WatchReactor* reactor = nullptr;
  };

  // Starts the next write if there is one; true when the stream must be finished.
  bool MaybeWriteLocked() {
    if (writing_ || finished_) return false;
    if (subscription_->Next(&current_, 0)) {
      writing_ = true;
      StartWrite(&current_);
      return false;
    }
    if (subscription_->cut_off()) {
      finished_ = true;
      return true;
    }
    return false;
  }

  void MaybeWrite() {
    bool finish = false;
    {
      absl::MutexLock lock(&shared_->mu);
      finish = MaybeWriteLocked();
    }
    if (finish) FinishCutOff();
  }

  void FinishCutOff() {
    Finish(ToGrpcStatus(
        WithRetryAfter(Error(absl::StatusCode::kResourceExhausted, "WATCHER_BEHIND",
                             "the watcher fell behind; re-read the store and watch again"),
                       0),
        nullptr));
  }

  StateFeed& feed_;
  std::shared_ptr<Shared> shared_;
  std::shared_ptr<StateFeed::Subscription> subscription_;
  v1::WatchEvent current_;
  bool writing_ = false;   // guarded by shared_->mu
  bool finished_ = false;  // guarded by shared_->mu
};

// The states a Watch asks for: every state when it names none.
constexpr int kMaxWatchedStates = 16;
absl::StatusOr<StateFeed::StateSet> WatchedStates(const v1::WatchRequest& request) {
  if (request.states_size() == 0) return StateFeed::kEveryState;
  if (request.states_size() > kMaxWatchedStates) {
    return Error(absl::StatusCode::kInvalidArgument, "TOO_MANY_STATES",
                 absl::StrCat("a Watch names at most ", kMaxWatchedStates, " states"));
  }
  StateFeed::StateSet states = 0;
  for (int state : request.states()) {
    if (state == v1::OUTBOX_STATE_UNSPECIFIED || !v1::OutboxState_IsValid(state)) {
      return Error(absl::StatusCode::kInvalidArgument, "UNKNOWN_STATE",
                   absl::StrCat("no outbox state has the number ", state));
    }
    states |= StateFeed::BitOf(static_cast<v1::OutboxState>(state));
  }
  return states;
}

// A Watch refused before it started.
class RefusedWatch : public grpc::ServerWriteReactor<v1::WatchEvent> {
 public:
  explicit RefusedWatch(grpc::Status status) { Finish(std::move(status)); }
  void OnDone() override { delete this; }
};

class AgentServiceImpl : public v1::Agent::CallbackService {
 public:
  AgentServiceImpl(Outbox& outbox, OutboxStore& store, CredentialState& credential, StateFeed& feed,
                   std::atomic<bool>& draining, std::function<void()> kick, std::string tenant)
      : tenant_(std::move(tenant)),
        outbox_(outbox),
        store_(store),
        credential_(credential),
        feed_(feed),
        draining_(draining),
        kick_(std::move(kick)) {}

  grpc::ServerUnaryReactor* Enqueue(grpc::CallbackServerContext* context,
                                    const v1::EnqueueRequest* request,
                                    v1::EnqueueResponse* response) override {
    return Authorized(context, response, [&]() -> grpc::ServerUnaryReactor* {
      if (draining_.load()) {
        return FinishUnary<v1::EnqueueResponse>(
            context,
            Error(absl::StatusCode::kUnavailable, "DRAINING", "the agent is shutting down"),
            response);
      }
      // On this callback thread: the write waits for no disk, and the answer goes from
      // the store's committer thread once the fsync shared by every waiting Enqueue is done.
      grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
      v1::Command command = request->command();
      TakeTraceFromMetadata(*context, &command);
      outbox_.Enqueue(std::move(command), [this, context, response,
                                           reactor](absl::StatusOr<v1::EnqueueResponse> result) {
        if (result.ok() && result->created()) kick_();
        if (result.ok()) {
          *response = std::move(*result);
          // The caller sent those bytes: they do not travel back (Get returns them).
          response->mutable_record()->mutable_command()->clear_request();
        }
        reactor->Finish(ToGrpcStatus(result.status(), context));
      });
      return reactor;
    });
  }

  grpc::ServerUnaryReactor* EnqueueBatch(grpc::CallbackServerContext* context,
                                         const v1::EnqueueBatchRequest* request,
                                         v1::EnqueueBatchResponse* response) override {
    return Authorized(context, response, [&]() -> grpc::ServerUnaryReactor* {
      absl::Status refused = BatchSizeRefusal(request->commands_size());
      if (refused.ok() && draining_.load()) {
        refused = Error(absl::StatusCode::kUnavailable, "DRAINING", "the agent is shutting down");
      }
      if (!refused.ok()) return FinishUnary<v1::EnqueueBatchResponse>(context, refused, response);
      // Every item exists before the first command starts: an answer may come from the
      // committer thread while later commands are still being started, and each answer
      // writes only its own item. Their writes join one group commit, so one fsync
      // serves the batch.
      const int n = request->commands_size();
      for (int i = 0; i < n; ++i) response->add_items();
      struct Batch {
        std::atomic<int> open{0};
        std::atomic<bool> created{false};
        grpc::ServerUnaryReactor* reactor = nullptr;
      };
      auto batch = std::make_shared<Batch>();
      batch->open.store(n);
      batch->reactor = context->DefaultReactor();
      for (int i = 0; i < n; ++i) {
        v1::EnqueueBatchItem* item = response->mutable_items(i);
        v1::Command command = request->commands(i);
        TakeTraceFromMetadata(*context, &command);
        outbox_.Enqueue(std::move(command), [this, batch,
                                               item](absl::StatusOr<v1::EnqueueResponse> result) {
          if (result.ok()) {
            if (result->created()) batch->created.store(true, std::memory_order_relaxed);
            *item->mutable_response() = std::move(*result);
            item->mutable_response()->mutable_record()->mutable_command()->clear_request();
          } else {
            SetStatusParts(result.status(), item);
          }
          if (batch->open.fetch_sub(1, std::memory_order_acq_rel) == 1) {
            if (batch->created.load(std::memory_order_relaxed)) kick_();
            batch->reactor->Finish(grpc::Status::OK);
          }
        });
      }
      return batch->reactor;
    });
  }

  grpc::ServerUnaryReactor* Get(grpc::CallbackServerContext* context,
                                const v1::GetRequest* request, OutboxRecord* response) override {
    return Authorized(context, response, [&]() -> grpc::ServerUnaryReactor* {
      return FinishUnary(context, Found(store_.Get(request->command_id()), request->command_id()),
                         response);
    });
  }

  grpc::ServerUnaryReactor* List(grpc::CallbackServerContext* context,
                                 const v1::ListRequest* request,
                                 v1::ListResponse* response) override {
    return Authorized(context, response, [&]() -> grpc::ServerUnaryReactor* {
      absl::StatusOr<v1::ListResponse> out;
      auto records = store_.List(request->state(), request->after_command_id(), request->limit());
      if (!records.ok()) {
        out = records.status();
      } else {
        // Records carry their requests: a page stops at about 1 MiB, under every
        // message size limit, and says where the next one starts.
        v1::ListResponse list;
        size_t bytes = 0;
        bool cut = false;
        for (auto& r : *records) {
          bytes += r.ByteSizeLong();
          if (bytes > kMaxListBytes && list.records_size() > 0) {
            cut = true;
            break;
          }
          *list.add_records() = std::move(r);
        }
        if (cut || (list.records_size() > 0 && records->size() >= OutboxStore::ListLimit(request->limit()))) {
          list.set_next_after_command_id(list.records().rbegin()->command().command_id());
        }
        out = std::move(list);
      }
      return FinishUnary(context, std::move(out), response);
    });
  }

  grpc::ServerWriteReactor<v1::WatchEvent>* Watch(grpc::CallbackServerContext* context,
                                                  const v1::WatchRequest* request) override {
    if (absl::Status allowed = Authorize(*context); !allowed.ok()) {
      return new RefusedWatch(ToGrpcStatus(allowed, context));
    }
    absl::StatusOr<StateFeed::StateSet> states = WatchedStates(*request);
    if (!states.ok()) return new RefusedWatch(ToGrpcStatus(states.status(), context));
    return new WatchReactor(feed_, *states);
  }

  grpc::ServerUnaryReactor* Stats(grpc::CallbackServerContext* context,
                                  const v1::StatsRequest* /*request*/,
                                  v1::StatsResponse* response) override {
    return Authorized(context, response, [&]() -> grpc::ServerUnaryReactor* {
      absl::StatusOr<v1::StatsResponse> out;
      auto oldest = store_.OldestWaitingAgeMs();
      if (!oldest.ok()) {
        out = oldest.status();
      } else {
        v1::StatsResponse stats;
        auto counts = store_.CountsByState();
        for (int s = 1; s < v1::OutboxState_ARRAYSIZE; ++s) {
          v1::StateCount* count = stats.add_counts();
          count->set_state(static_cast<v1::OutboxState>(s));
          count->set_count(counts[s]);
        }
        stats.set_oldest_queued_age_ms(*oldest);
        stats.set_credential_epoch(credential_.session().epoch);
        stats.set_revoked(credential_.revoked());
        out = std::move(stats);
      }
      return FinishUnary(context, std::move(out), response);
    });
  }

  grpc::ServerUnaryReactor* Requeue(grpc::CallbackServerContext* context,
                                    const v1::RequeueRequest* request,
                                    OutboxRecord* response) override {
    return OperatorOnly(context, response, [&]() -> grpc::ServerUnaryReactor* {
      auto result = outbox_.Requeue(request->command_id());
      if (result.ok()) kick_();
      return FinishUnary(context, std::move(result), response);
    });
  }

  grpc::ServerUnaryReactor* Drop(grpc::CallbackServerContext* context,
                                 const v1::DropRequest* request,
                                 OutboxRecord* response) override {
    return OperatorOnly(context, response, [&]() -> grpc::ServerUnaryReactor* {
      auto result = outbox_.Drop(request->command_id(), request->why());
      if (result.ok()) kick_();  // the entity's next command may be due now
      return FinishUnary(context, std::move(result), response);
    });
  }

  grpc::ServerUnaryReactor* SetCredential(grpc::CallbackServerContext* context,
                                          const v1::SetCredentialRequest* request,
                                          v1::SetCredentialResponse* response) override {
    return OperatorOnly(context, response, [&]() -> grpc::ServerUnaryReactor* {
      absl::Status set = credential_.Set(request->epoch(), request->revoked());
      absl::StatusOr<v1::SetCredentialResponse> out;
      if (set.ok()) {
        v1::SetCredentialResponse r;
        r.set_epoch(credential_.session().epoch);
        r.set_revoked(credential_.revoked());
        out = r;
        kick_();
      } else {
        out = set;
      }
      return FinishUnary(context, std::move(out), response);
    });
  }

 private:
  // The agent serves one tenant. A caller authenticated by a client certificate must be
  // of that tenant; a plaintext caller (local development) is taken at its word.
  absl::Status Authorize(const grpc::CallbackServerContext& context) const {
    absl::StatusOr<std::string> tenant = CallerTenant(context);
    if (!tenant.ok()) return tenant.status();
    if (!tenant->empty() && *tenant != tenant_) {
      return Error(
          absl::StatusCode::kPermissionDenied, "WRONG_TENANT",
          absl::StrCat("this agent serves tenant \"", tenant_, "\", not \"", *tenant, "\""));
    }
    return absl::OkStatus();
  }

  template <typename Response, typename Handler>
  grpc::ServerUnaryReactor* Authorized(grpc::CallbackServerContext* context, Response* response,
                                       Handler handler) {
    if (absl::Status allowed = Authorize(*context); !allowed.ok()) {
      LogWarn("caller refused",
              {{"reason", std::string(allowed.message())}, {"peer", context->peer()}});
      return FinishUnary<Response>(context, allowed, response);
    }
    return handler();
  }

  // Requeue, Drop and SetCredential change what is replayed, or stop all replay: an
  // operator of the agent's tenant only (an operator certificate; the eonce-operator
  // header in plaintext). The agent holds no policy, so any operator its tenant's
  // certificates name will do.
  template <typename Response, typename Handler>
  grpc::ServerUnaryReactor* OperatorOnly(grpc::CallbackServerContext* context,
                                         Response* response, Handler handler) {
    return Authorized(context, response, [&]() -> grpc::ServerUnaryReactor* {
      if (CallerOperator(*context).empty()) {
        LogWarn("operator call refused", {{"peer", context->peer()}});
        return FinishUnary<Response>(
            context,
            Error(absl::StatusCode::kPermissionDenied, "OPERATOR_REQUIRED",
                  "this call needs an operator identity (a certificate naming "
                  "spiffe://<domain>/tenant/<tenant>/operator/<name>)"),
            response);
      }
      return handler();
    });
  }

  const std::string tenant_;
  Outbox& outbox_;
  OutboxStore& store_;
  CredentialState& credential_;
  StateFeed& feed_;
  std::atomic<bool>& draining_;
  std::function<void()> kick_;
};

}  // namespace

std::unique_ptr<v1::Agent::CallbackService> NewAgentService(
    Outbox& outbox, OutboxStore& store, CredentialState& credential, StateFeed& feed,
    std::atomic<bool>& draining, std::function<void()> kick, std::string tenant) {
  return std::make_unique<AgentServiceImpl>(outbox, store, credential, feed, draining,
                                            std::move(kick), std::move(tenant));
}

}  // namespace eonce
