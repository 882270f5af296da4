// Sharded sidecars s0..s(n-1) on an in-memory coordination store, for integration tests
// of slot moves: the first map names them at placeholder addresses, and once each listens
// the map names where (the sidecars read it from the store, as from etcd).
#ifndef EONCE_TESTS_INTEGRATION_SHARDED_SIDECARS_H_
#define EONCE_TESTS_INTEGRATION_SHARDED_SIDECARS_H_

#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "common/coord/memory_map_store.h"
#include "common/coord/slots.h"
#include "dedupe_sidecar/doors/sidecar_service.h"
#include "eonce/v1/sidecar.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

namespace eonce::testing {

// Starts sidecar i with options_for(i) (its shard, store and lease filled in here), into
// leases[i], sidecars[i] and stubs[i] (arrays of n, the leases outliving the sidecars), and
// waits until every one serves the map that names their addresses.
inline absl::Status StartShardedSidecars(
    MemoryMapStore& store, int n, const std::function<SidecarServerOptions(int)>& options_for,
    std::unique_ptr<ShardLease>* leases, std::unique_ptr<SidecarServer>* sidecars,
    std::unique_ptr<v1::Sidecar::Stub>* stubs) {
  std::vector<v1::ShardInfo> shards(n);
  for (int i = 0; i < n; ++i) {
    shards[i].set_id(absl::StrCat("s", i));
    shards[i].set_address("pending:1");
  }
  absl::StatusOr<SlotMap> first = store.CompareAndSwap(0, *SlotMap::Even(shards));
  if (!first.ok()) return first.status();
  for (int i = 0; i < n; ++i) {
    SidecarServerOptions options = options_for(i);
    options.shard_id = shards[i].id();
    leases[i] = store.NewLease(MemoryLeaseOptions{60'000, 1'000});
    options.map_store = &store;
    options.shard_lease = leases[i].get();
    absl::StatusOr<std::unique_ptr<SidecarServer>> sidecar =
        SidecarServer::Start(options, RealClock::Get());
    if (!sidecar.ok()) return sidecar.status();
    sidecars[i] = std::move(*sidecar);
    shards[i].set_address(absl::StrCat("127.0.0.1:", sidecars[i]->port()));
    stubs[i] = v1::Sidecar::NewStub(
        grpc::CreateChannel(shards[i].address(), grpc::InsecureChannelCredentials()));
  }
  absl::StatusOr<SlotMap> named = store.CompareAndSwap(first->epoch(), *SlotMap::Even(shards));
  if (!named.ok()) return named.status();
  for (int i = 0; i < n; ++i) {
    if (!sidecars[i]->AwaitShardServing(named->epoch(), absl::Seconds(30))) {
      return absl::DeadlineExceededError(absl::StrCat("shard ", shards[i].id(), " never served"));
    }
  }
  return absl::OkStatus();
}

}  // namespace eonce::testing

#endif  // EONCE_TESTS_INTEGRATION_SHARDED_SIDECARS_H_
