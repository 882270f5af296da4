#include "outbox_agent/transport/grpc_sidecar_client.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <iterator>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/rpc/call_batcher.h"
#include "common/base/clock.h"
#include "common/command/command.h"
#include "common/rpc/grpc_status.h"
#include "common/base/log.h"
#include "common/base/status.h"
#include "common/command/trace_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace eonce {
namespace {

constexpr int64_t kInfoRefreshMs = 60'000;

// Bytes of commands per SubmitBatch: within the smallest message limit a sidecar's binary
// sets (its max_request_bytes plus 1 MiB), so a batch of commands it takes one by one
// fits in one message too. A command larger than this goes alone.
constexpr size_t kMaxBatchBytes = 1 << 20;
// SubmitBatch calls in flight to one sidecar under one session.
constexpr int kBatchCallsInFlight = 2;

constexpr char kShardedPrefix[] = "sharded:";

// The answer to a call made while the client closes: nothing was sent.
absl::Status Closing() {
  return Error(absl::StatusCode::kCancelled, "CLIENT_CLOSING",
               "the agent is shutting down; nothing was sent");
}

void AddSession(grpc::ClientContext* context, const Session& session) {
  context->AddMetadata(kTenantHeader, session.tenant);
  if (!session.actor.empty()) context->AddMetadata(kActorHeader, session.actor);
  context->AddMetadata(kCredentialEpochHeader, absl::StrCat(session.epoch));
}

}  // namespace

absl::StatusOr<std::unique_ptr<GrpcSidecarClient::Route>> GrpcSidecarClient::NewRoute(
    const std::string& target) {
  auto route = std::make_unique<Route>();
  route->sharded = absl::StartsWith(target, kShardedPrefix);
  route->address = route->sharded ? target.substr(strlen(kShardedPrefix)) : target;
  if (route->address.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("routes: \"", target, "\" names no address"));
  }
  route->stub = v1::Sidecar::NewStub(NewChannel(route->address, tls_, kMaxMessageBytes));
  return route;
}

absl::StatusOr<std::unique_ptr<GrpcSidecarClient>> GrpcSidecarClient::Create(
    const std::string& routes, const std::string& default_address, const TlsFiles& tls,
    Clock& clock) {
  std::unique_ptr<GrpcSidecarClient> client(new GrpcSidecarClient(clock, tls));
  for (absl::string_view entry : absl::StrSplit(routes, ',', absl::SkipEmpty())) {
    std::pair<std::string, std::string> kv = absl::StrSplit(entry, absl::MaxSplits('=', 1));
    if (kv.first.empty() || kv.second.empty() || kv.first.find('/') != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "routes: \"", entry,
          "\" is not service=address or service=sharded:address (service like "
          "eonce.ledger.v1.Ledger)"));
    }
    EONCE_ASSIGN_OR_RETURN(client->routes_[kv.first], client->NewRoute(kv.second));
  }
  if (!default_address.empty()) {
    EONCE_ASSIGN_OR_RETURN(client->default_route_, client->NewRoute(default_address));
  }
  if (client->routes_.empty() && client->default_route_ == nullptr) {
    return absl::InvalidArgumentError("sidecar: a default sidecar or routes are required");
  }
  return client;
}

GrpcSidecarClient::Route* GrpcSidecarClient::RouteFor(const std::string& target_method) {
  // "/package.Service/Method" -> "package.Service"
  size_t slash = target_method.rfind('/');
  std::string service =
      slash == std::string::npos || slash == 0 ? "" : target_method.substr(1, slash - 1);
  auto it = routes_.find(service);
  return it != routes_.end() ? it->second.get() : default_route_.get();
}

template <typename Request, typename Response, typename Issue>
void GrpcSidecarClient::Call(const v1::Command& command, const Session& session,
                             int64_t deadline_ms, Request request, Issue issue,
                             std::function<void(absl::StatusOr<Response>)> done) {
  Route* route = RouteFor(command.target_method());
  if (route == nullptr) {
    done(Error(absl::StatusCode::kFailedPrecondition, "NO_ROUTE",
               absl::StrCat("no sidecar serves ", command.target_method())));
    return;
  }
  absl::StatusOr<std::shared_ptr<v1::Sidecar::Stub>> stub = StubFor(*route, command);
  if (!stub.ok()) {
    done(stub.status());
    return;
  }
  struct State {
    CallTracker::Ticket ticket;  // first: goes last
    std::shared_ptr<v1::Sidecar::Stub> stub;  // alive while the call is
    grpc::ClientContext context;
    Request request;
    Response response;
  };
  auto state = std::make_shared<State>();
  state->stub = *stub;
  if (!calls_.Start(state)) {
    done(Closing());
    return;
  }
  state->context.set_deadline(WallDeadline(clock_, deadline_ms));
  AddSession(&state->context, session);
  // The attempt's span, for a mesh between here and the sidecar; the sidecar's Submit
  // reads the command's own field.
  if (!command.trace().traceparent().empty()) {
    state->context.AddMetadata(kTraceparentHeader, command.trace().traceparent());
    if (!command.trace().tracestate().empty()) {
      state->context.AddMetadata(kTracestateHeader, command.trace().tracestate());
    }
  }
  state->request = std::move(request);
  issue(**stub, &state->context, &state->request, &state->response,
        [this, state, route, done = std::move(done)](grpc::Status status) {
          if (!status.ok()) {
            absl::Status failed = FromGrpcStatus(status, &state->context);
            if (route->sharded) OnSlotRefusal(route, failed);
            done(std::move(failed));
          } else {
            done(std::move(state->response));
          }
        });
}

void GrpcSidecarClient::Submit(const v1::Command& command, const Session& session,
                               int64_t deadline_ms,
                               std::function<void(absl::StatusOr<v1::SubmitResponse>)> done) {
  Route* route = RouteFor(command.target_method());
  if (!batch_submits_ || route == nullptr || !route->batches.load()) {
    SubmitOne(command, session, deadline_ms, std::move(done));
    return;
  }
  absl::StatusOr<std::shared_ptr<v1::Sidecar::Stub>> stub = StubFor(*route, command);
  if (!stub.ok()) {
    done(stub.status());
    return;
  }
  BatcherFor(route, *stub, session)->Submit(command, deadline_ms, std::move(done));
}

void GrpcSidecarClient::SubmitMany(const Session& session, std::vector<SubmitCall> calls) {
  // Grouped by sidecar, in the calls' order; a handful of sidecars at most, so a list.
  struct Group {
    Route* route;
    std::shared_ptr<v1::Sidecar::Stub> stub;
    std::vector<SubmitBatcher::Entry> entries;
  };
  std::vector<Group> groups;
  for (SubmitCall& call : calls) {
    Route* route = RouteFor(call.command->target_method());
    if (!batch_submits_ || route == nullptr || !route->batches.load()) {
      SubmitOne(*call.command, session, call.deadline_ms, std::move(call.done));
      continue;
    }
    absl::StatusOr<std::shared_ptr<v1::Sidecar::Stub>> stub = StubFor(*route, *call.command);
    if (!stub.ok()) {
      call.done(stub.status());
      continue;
    }
    auto group = std::find_if(groups.begin(), groups.end(),
                              [&stub](const Group& g) { return g.stub == *stub; });
    if (group == groups.end()) group = groups.insert(groups.end(), Group{route, *stub, {}});
    group->entries.push_back(
        SubmitBatcher::Entry{*call.command, call.deadline_ms, std::move(call.done)});
  }
  for (Group& group : groups) {
    BatcherFor(group.route, group.stub, session)->AddMany(std::move(group.entries));
  }
}

std::shared_ptr<SubmitBatcher> GrpcSidecarClient::BatcherFor(
    Route* route, std::shared_ptr<v1::Sidecar::Stub> stub, const Session& session) {
  return batchers_.For(
      SubmitBatcherRegistry::Key{stub.get(), session.tenant, session.actor, session.epoch},
      [this, route, &stub, &session] {
        SubmitBatcher::Options options;
        options.max_calls = kBatchCallsInFlight;
        options.max_batch_bytes = kMaxBatchBytes;
        return std::make_unique<SubmitBatcher>(
            options, [this, route, stub, session](std::vector<v1::Command> commands,
                                                  int64_t deadline_ms,
                                                  SubmitBatcher::BatchDone done) {
              SendBatch(route, stub, session, std::move(commands), deadline_ms,
                        std::move(done));
            });
      });
}

void GrpcSidecarClient::SendBatch(Route* route, std::shared_ptr<v1::Sidecar::Stub> stub,
                                  const Session& session, std::vector<v1::Command> commands,
                                  int64_t deadline_ms, SubmitBatcher::BatchDone done) {
  struct State {
    CallTracker::Ticket ticket;  // first: goes last
    grpc::ClientContext context;
    v1::SubmitBatchRequest request;
    v1::SubmitBatchResponse response;
  };
  auto state = std::make_shared<State>();
  if (!calls_.Start(state)) {
    done(Closing());
    return;
  }
  if (deadline_ms > 0) state->context.set_deadline(WallDeadline(clock_, deadline_ms));
  AddSession(&state->context, session);
  for (v1::Command& c : commands) *state->request.add_commands() = std::move(c);
  stub->async()->SubmitBatch(
      &state->context, &state->request, &state->response,
      [this, state, route, session, deadline_ms, done = std::move(done)](grpc::Status status) {
        absl::Status failed = FromGrpcStatus(status, &state->context);
        bool one_by_one = false;
        if (status.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
          // A sidecar from before SubmitBatch, which looked at none of the commands.
          LogWarn("the sidecar has no SubmitBatch; one Submit per command from now on",
                  {{"sidecar", route->address}});
          route->batches.store(false);
          one_by_one = true;
        } else if (PastMessageLimit(failed) && state->request.commands_size() > 1) {
          // The batch, or its answer, did not fit the sidecar's message limit, which each
          // command and each answer alone does. A batch refused as it arrived started
          // nothing; one whose answer could not be sent ran its commands, and the sidecar
          // answers each one's second call from its record.
          if (!route->split_logged.exchange(true)) {
            LogWarn("a batch was past the sidecar's message limit; its commands go one "
                    "Submit each",
                    {{"sidecar", route->address}, {"error", failed.ToString()}});
          }
          one_by_one = true;
        }
        if (one_by_one) {
          auto* commands = state->request.mutable_commands();
          SubmitEach(std::vector<v1::Command>(std::make_move_iterator(commands->begin()),
                                              std::make_move_iterator(commands->end())),
                     session, deadline_ms, std::move(done));
        } else if (!failed.ok()) {
          if (route->sharded) OnSlotRefusal(route, failed);
          done(std::move(failed));
        } else {
          std::vector<SubmitBatcher::Answer> answers = SubmitBatcher::AnswersOf(state->response);
          if (route->sharded) {
            for (const SubmitBatcher::Answer& answer : answers) {
              if (!answer.ok()) OnSlotRefusal(route, answer.status());
            }
          }
          done(std::move(answers));
        }
      });
}

void GrpcSidecarClient::SubmitEach(std::vector<v1::Command> commands, const Session& session,
                                   int64_t deadline_ms, SubmitBatcher::BatchDone done) {
  SendEachAlone<v1::Command, SubmitBatcher::Answer>(
      std::move(commands),
      [this, session, deadline_ms](v1::Command command,
                                   std::function<void(SubmitBatcher::Answer)> answered) {
        SubmitOne(command, session, deadline_ms, std::move(answered));
      },
      [done = std::move(done)](std::vector<SubmitBatcher::Answer> answers) {
        done(std::move(answers));
      });
}

void GrpcSidecarClient::SubmitOne(const v1::Command& command, const Session& session,
                                  int64_t deadline_ms,
                                  std::function<void(absl::StatusOr<v1::SubmitResponse>)> done) {
  v1::SubmitRequest request;
  *request.mutable_command() = command;
  Call<v1::SubmitRequest, v1::SubmitResponse>(
      command, session, deadline_ms, std::move(request),
      [](v1::Sidecar::Stub& stub, grpc::ClientContext* context, const v1::SubmitRequest* r,
         v1::SubmitResponse* response, std::function<void(grpc::Status)> on_done) {
        stub.async()->Submit(context, r, response, std::move(on_done));
      },
      std::move(done));
}

void GrpcSidecarClient::Reconcile(
    const v1::Command& command, const Session& session, int64_t deadline_ms,
    std::function<void(absl::StatusOr<v1::ReconcileResponse>)> done) {
  Call<v1::ReconcileRequest, v1::ReconcileResponse>(
      command, session, deadline_ms, ReconcileRequestFor(command),
      [](v1::Sidecar::Stub& stub, grpc::ClientContext* context, const v1::ReconcileRequest* r,
         v1::ReconcileResponse* response, std::function<void(grpc::Status)> on_done) {
        stub.async()->Reconcile(context, r, response, std::move(on_done));
      },
      std::move(done));
}

void GrpcSidecarClient::AskInfo(Route* route) {
  {
    absl::MutexLock lock(&route->mu);
    if (route->asking) return;
    route->asking = true;
    route->asked_at_ms = clock_.NowMs();
  }
  struct State {
    CallTracker::Ticket ticket;  // first: goes last
    grpc::ClientContext context;
    v1::GetInfoRequest request;
    v1::GetInfoResponse response;
  };
  auto state = std::make_shared<State>();
  if (!calls_.Start(state)) {
    absl::MutexLock lock(&route->mu);
    route->asking = false;
    return;
  }
  state->context.set_deadline(WallDeadline(clock_, clock_.NowMs() + kInfoTimeoutMs));
  route->stub->async()->GetInfo(&state->context, &state->request, &state->response,
                                [state, route](grpc::Status status) {
                                  absl::MutexLock lock(&route->mu);
                                  route->asking = false;
                                  if (status.ok()) {
                                    route->retention_ms = state->response.retention_ms();
                                  }
                                });
}

std::optional<int64_t> GrpcSidecarClient::RetentionMs(const std::string& target_method) {
  Route* route = RouteFor(target_method);
  if (route == nullptr) return std::nullopt;
  std::optional<int64_t> known;
  bool stale = false;
  {
    absl::MutexLock lock(&route->mu);
    known = route->retention_ms;
    int64_t wait = known.has_value() ? kInfoRefreshMs : kInfoTimeoutMs;
    stale = clock_.NowMs() - route->asked_at_ms >= wait;
  }
  if (stale) AskInfo(route);
  return known;
}

GrpcSidecarClient::~GrpcSidecarClient() { calls_.CloseAndWait(); }

std::map<std::string, int64_t> GrpcSidecarClient::FetchRetentions(int64_t timeout_ms) {
  std::vector<std::pair<std::string, Route*>> all;
  for (auto& [service, route] : routes_) all.emplace_back(service, route.get());
  if (default_route_ != nullptr) all.emplace_back("(default)", default_route_.get());
  std::map<std::string, int64_t> out;
  for (auto& [name, route] : all) {
    grpc::ClientContext context;
    context.set_deadline(WallIn(timeout_ms));
    context.set_wait_for_ready(true);
    v1::GetInfoResponse info;
    if (route->stub->GetInfo(&context, v1::GetInfoRequest(), &info).ok()) {
      absl::MutexLock lock(&route->mu);
      route->retention_ms = info.retention_ms();
      route->asked_at_ms = clock_.NowMs();
      out[name] = info.retention_ms();
    }
    if (!route->sharded) continue;
    grpc::ClientContext map_context;
    map_context.set_deadline(WallIn(timeout_ms));
    v1::SlotMap proto;
    if (route->stub->GetSlotMap(&map_context, v1::GetSlotMapRequest(), &proto).ok()) {
      absl::StatusOr<SlotMap> map = SlotMap::FromProto(std::move(proto));
      absl::MutexLock lock(&route->mu);
      route->map_asked_at_ms = clock_.NowMs();
      // Only a newer map: a shard that lags (or an answer that crossed a newer one on the
      // way) must not take the route back to an older owner.
      if (map.ok() && (route->map == nullptr || map->epoch() > route->map->epoch())) {
        route->map = std::make_shared<const SlotMap>(std::move(*map));
      }
    }
  }
  return out;
}

}  // namespace eonce
