// GrpcSidecarClient's sharded routes: each command's shard from the slot map held, and
// the map asked again on a schedule, on a refusal under a newer epoch, or when a shard
// cannot be reached (grpc_sidecar_client.h).
#include <iterator>

#include "absl/strings/str_cat.h"
#include "common/rpc/grpc_status.h"
#include "common/base/log.h"
#include "common/base/status.h"
#include "outbox_agent/transport/grpc_sidecar_client.h"

namespace eonce {
namespace {

// How often a sharded route's slot map is asked again without a refusal to prompt it.
constexpr int64_t kSlotMapRefreshMs = 30'000;
// After a shard could not be reached, the soonest the seed is asked for the map again.
constexpr int64_t kUnreachableRefreshMs = 1'000;
// How long to wait before a command is retried while no slot map is held yet.
constexpr int64_t kNoSlotMapRetryMs = 200;
// Stubs kept for shard addresses; past it, those the held map no longer names go.
constexpr size_t kMaxShardStubs = 2 * kMaxShards;

}  // namespace

absl::StatusOr<std::shared_ptr<v1::Sidecar::Stub>> GrpcSidecarClient::StubFor(
    Route& route, const v1::Command& command) {
  if (!route.sharded) return route.stub;
  std::shared_ptr<const SlotMap> map;
  bool stale = false;
  {
    absl::MutexLock lock(&route.mu);
    map = route.map;
    int64_t wait = map != nullptr ? kSlotMapRefreshMs : kNoSlotMapRetryMs;
    stale = clock_.NowMs() - route.map_asked_at_ms >= wait;
  }
  if (stale) AskSlotMap(&route, "");
  if (map == nullptr) {
    return WithRetryAfter(Error(absl::StatusCode::kUnavailable, "SLOT_MAP_UNKNOWN",
                                absl::StrCat("no slot map from ", route.address,
                                             " yet; nothing was sent")),
                          kNoSlotMapRetryMs);
  }
  const std::string& address = map->AddressOf(map->OwnerOf(SlotOfCommand(command)));
  absl::MutexLock lock(&route.mu);
  auto it = route.shard_stubs.find(address);
  if (it != route.shard_stubs.end()) return it->second;
  if (route.shard_stubs.size() >= kMaxShardStubs) {
    for (auto old = route.shard_stubs.begin(); old != route.shard_stubs.end();) {
      bool named = false;
      for (const v1::ShardInfo& shard : map->proto().shards()) {
        named |= shard.address() == old->first;
      }
      old = named ? std::next(old) : route.shard_stubs.erase(old);
    }
  }
  std::shared_ptr<v1::Sidecar::Stub> stub =
      v1::Sidecar::NewStub(NewChannel(address, tls_, kMaxMessageBytes));
  route.shard_stubs[address] = stub;
  return stub;
}

void GrpcSidecarClient::OnSlotRefusal(Route* route, const absl::Status& status) {
  std::string reason = ReasonOf(status);
  if (reason.empty() && status.code() == absl::StatusCode::kUnavailable) {
    // No sidecar answered: the shard may be gone (scaled down after its slots moved).
    // Ask the seed again, at most every kUnreachableRefreshMs.
    bool due = false;
    {
      absl::MutexLock lock(&route->mu);
      due = clock_.NowMs() - route->map_asked_at_ms >= kUnreachableRefreshMs;
    }
    if (due) AskSlotMap(route, "");
    return;
  }
  if (reason != "SLOT_MOVED" && reason != "SLOT_MIGRATING") return;
  std::map<std::string, std::string> facts = ErrorMetadataOf(status);
  uint64_t epoch = 0;
  if (!absl::SimpleAtoi(facts["epoch"], &epoch)) return;
  {
    absl::MutexLock lock(&route->mu);
    if (route->map != nullptr && route->map->epoch() >= epoch) return;
  }
  // The refusing sidecar holds a newer map; the owner it names holds at least as new.
  AskSlotMap(route, facts["owner_address"]);
}

void GrpcSidecarClient::AskSlotMap(Route* route, const std::string& address) {
  std::shared_ptr<v1::Sidecar::Stub> stub = route->stub;
  {
    absl::MutexLock lock(&route->mu);
    if (route->asking_map) return;
    route->asking_map = true;
    route->map_asked_at_ms = clock_.NowMs();
    if (!address.empty()) {
      auto it = route->shard_stubs.find(address);
      if (it != route->shard_stubs.end()) stub = it->second;
    }
  }
  struct State {
    CallTracker::Ticket ticket;  // first: goes last
    std::shared_ptr<v1::Sidecar::Stub> stub;  // alive while the call is
    grpc::ClientContext context;
    v1::GetSlotMapRequest request;
    v1::SlotMap response;
  };
  auto state = std::make_shared<State>();
  state->stub = stub;
  if (!calls_.Start(state)) {
    absl::MutexLock lock(&route->mu);
    route->asking_map = false;
    return;
  }
  state->context.set_deadline(WallDeadline(clock_, clock_.NowMs() + kInfoTimeoutMs));
  stub->async()->GetSlotMap(
      &state->context, &state->request, &state->response,
      [state, route](grpc::Status status) {
        absl::StatusOr<SlotMap> map =
            status.ok() ? SlotMap::FromProto(std::move(state->response))
                        : absl::StatusOr<SlotMap>(FromGrpcStatus(status, &state->context));
        {
          absl::MutexLock lock(&route->mu);
          route->asking_map = false;
          if (map.ok() && (route->map == nullptr || map->epoch() > route->map->epoch())) {
            route->map = std::make_shared<const SlotMap>(std::move(*map));
          }
        }
        if (!map.ok()) {
          LogWarn("slot map unavailable", {{"sidecar", route->address},
                                           {"error", std::string(map.status().message())}});
        }
      });
}

uint64_t GrpcSidecarClient::SlotMapEpoch(const std::string& target_method) {
  Route* route = RouteFor(target_method);
  if (route == nullptr || !route->sharded) return 0;
  absl::MutexLock lock(&route->mu);
  return route->map != nullptr ? route->map->epoch() : 0;
}

}  // namespace eonce
