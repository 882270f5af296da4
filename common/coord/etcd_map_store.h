// The coordination service on etcd 3.4 (map_store.h's contract), through EtcdClient.
//
// Keys, under a prefix (--etcd_prefix, default "/eonce/default"):
//   <prefix>/slotmap         the slot map as JSON, its epoch field written as 0: the epoch
//                            is the key's mod_revision, so two maps never share one.
//   <prefix>/shards/<shard>  {"address": ..., "held_epoch": N}, put with the shard's lease:
//                            created only when absent (one holder per shard id), gone when
//                            the lease ends (live iff it exists).
// A map change is one Txn: compare mod_revision(slotmap) == expected (create_revision == 0
// for the first map), then put. A shard key is created by a Txn on create_revision == 0
// and rewritten only while its lease is still ours (compare lease == our lease).
//
// Lease margins (EtcdShardLease): etcd counts a lease's TTL from when it receives the grant
// or keepalive, which is after we sent it; so this process may serve until
//   send time of the last answered renewal + TTL * (1 - 1% drift) - 1000 ms,
// strictly before etcd could expire the lease and let another process take the shard.
// The TTL used is the one asked for or the one etcd granted, whichever is shorter.
#ifndef EONCE_COMMON_COORD_ETCD_MAP_STORE_H_
#define EONCE_COMMON_COORD_ETCD_MAP_STORE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "common/base/clock.h"
#include "common/coord/etcd_client.h"
#include "common/coord/map_store.h"
#include "common/coord/slots.h"
#include "common/rpc/tls.h"

namespace eonce {

inline constexpr char kDefaultEtcdPrefix[] = "/eonce/default";
inline constexpr int64_t kDefaultLeaseTtlMs = 10'000;
// etcd grants whole seconds, and the serving window is the TTL less 1 s of margin.
inline constexpr int64_t kMinLeaseTtlMs = 2'000;
inline constexpr int64_t kMaxLeaseTtlMs = 300'000;
inline constexpr int64_t kLeaseMarginMs = 1'000;
inline constexpr double kLeaseClockDrift = 0.01;
inline constexpr size_t kMaxEtcdPrefixBytes = 256;
inline constexpr size_t kMaxShardIdBytes = 128;
inline constexpr size_t kMaxShardAddressBytes = 512;

// "<prefix>/slotmap" and "<prefix>/shards/<shard>".
std::string SlotMapKey(const std::string& prefix);
std::string ShardKey(const std::string& prefix, const std::string& shard);

// Until when a lease renewed at `sent_ms` may be served on, by the margins above.
int64_t LeaseServeUntilMs(int64_t sent_ms, int64_t ttl_ms);

class EtcdMapStore : public MapStore {
 public:
  EtcdMapStore(EtcdClient& client, std::string prefix) : client_(client), prefix_(std::move(prefix)) {}

  absl::StatusOr<SlotMap> Read() override;
  absl::StatusOr<SlotMap> CompareAndSwap(uint64_t expected_epoch, const SlotMap& next) override;
  absl::StatusOr<SlotMap> WaitNewer(uint64_t after_epoch, int64_t timeout_ms) override;
  absl::StatusOr<ShardPresence> Presence(const std::string& shard) override;

 private:
  EtcdClient& client_;
  const std::string prefix_;
};

// Not thread-safe (map_store.h). The destructor does not release the lease: a process that
// stops without Release leaves the shard held until the lease lapses, as a crash does.
class EtcdShardLease : public ShardLease {
 public:
  EtcdShardLease(EtcdClient& client, Clock& clock, std::string prefix, int64_t ttl_ms)
      : client_(client), clock_(clock), prefix_(std::move(prefix)), ttl_ms_(ttl_ms) {}

  absl::Status Acquire(const std::string& shard, const std::string& address) override;
  absl::Status Renew() override;
  int64_t ServeUntilMs() const override { return lease_id_ == 0 ? 0 : serve_until_ms_; }
  absl::Status Acknowledge(uint64_t epoch) override;
  void Release() override;

  // The etcd lease held (0: none), for tests and logs.
  int64_t lease_id() const { return lease_id_; }

 private:
  // Forgets the lease (it is gone, or being given back).
  void Drop();

  EtcdClient& client_;
  Clock& clock_;
  const std::string prefix_;
  const int64_t ttl_ms_;
  std::string shard_;
  std::string address_;
  int64_t lease_id_ = 0;
  int64_t granted_ttl_ms_ = 0;
  int64_t serve_until_ms_ = 0;
};

struct EtcdCoordOptions {
  std::string endpoints;  // --etcd_endpoints: comma list of host:port
  std::string prefix = kDefaultEtcdPrefix;
  int64_t lease_ttl_ms = kDefaultLeaseTtlMs;
  int64_t call_timeout_ms = 2'000;
  TlsFiles tls;
};

// The client, the map store and the shard leases of one process, from its flags.
class EtcdCoordination {
 public:
  // INVALID_ARGUMENT naming the flag that is wrong. Connects lazily: etcd being down is not
  // an error here but on the first call.
  static absl::StatusOr<std::unique_ptr<EtcdCoordination>> Create(const EtcdCoordOptions& options,
                                                                  Clock& clock);

  MapStore& store() { return *store_; }
  EtcdClient& client() { return *client_; }
  std::unique_ptr<EtcdShardLease> NewLease();

 private:
  EtcdCoordination(std::unique_ptr<EtcdClient> client, Clock& clock, EtcdCoordOptions options);

  std::unique_ptr<EtcdClient> client_;
  Clock& clock_;
  const EtcdCoordOptions options_;
  std::unique_ptr<EtcdMapStore> store_;
};

}  // namespace eonce

#endif  // EONCE_COMMON_COORD_ETCD_MAP_STORE_H_
