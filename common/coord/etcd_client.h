// EtcdClient: the few calls of etcd's v3 gRPC API (proto/etcd/) that the coordination
// code makes, each bounded by a deadline and failing over between the cluster's members.
//
// Endpoints are "host:port" of etcd members (a comma list in the flags). A call goes to the
// member that answered last; when that member is UNAVAILABLE (down, no leader) the same
// call goes to the next one, each member at most once, all within one deadline (a member
// not connected yet gets an equal share of what is left to connect in). A call
// that reached no member in time is UNAVAILABLE (reason ETCD_UNREACHABLE), for the caller to
// retry with backoff. A retried Txn may already have been applied by the member that went
// away: its compare then fails, and the caller re-reads (a CAS loser does that anyway).
//
// TLS: with TlsFiles set, mutual TLS with the credentials of every eonce hop
// (common/rpc/tls.h ChannelCredentials) on channels of our own: reconnects every 100 ms to 1 s
// but gRPC's default connect timeout, which NewChannel's short backoff would cut to 100 ms
// (see AwaitConnected in the .cc for why a connect can take longer). etcd must be
// started with --client-cert-auth and a certificate whose SANs name the endpoint's host.
// No etcd user/password authentication.
//
// Keepalives open one short stream per renewal instead of holding one open: a renewal
// every TTL/3 is cheap, and no stream outlives its deadline or needs a reader thread.
//
// Thread-safe: every method may be called from any thread.
#ifndef EONCE_COMMON_COORD_ETCD_CLIENT_H_
#define EONCE_COMMON_COORD_ETCD_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/rpc/tls.h"
#include "etcd/etcdserverpb/rpc.grpc.pb.h"

namespace eonce {

// Bounds: a cluster has a handful of members; a value we store is at most a slot map.
inline constexpr size_t kMaxEtcdEndpoints = 16;
inline constexpr int kMaxEtcdMessageBytes = 4 << 20;

struct EtcdClientOptions {
  std::vector<std::string> endpoints;  // host:port of each member
  int64_t call_timeout_ms = 2'000;     // every unary call and keepalive, all attempts together
  TlsFiles tls;                        // none: plaintext
};

// "a:1,b:2" -> {"a:1", "b:2"}; INVALID_ARGUMENT (naming --etcd_endpoints) for an empty list,
// an entry without a port, or more than kMaxEtcdEndpoints.
absl::StatusOr<std::vector<std::string>> ParseEtcdEndpoints(absl::string_view list);

// What one watch call saw: the events of the first batch, or that the start revision was
// compacted away (compact_revision > 0), or nothing before the timeout (both empty).
struct EtcdWatchResult {
  std::vector<mvccpb::Event> events;
  int64_t compact_revision = 0;
};

class EtcdClient {
 public:
  static absl::StatusOr<std::unique_ptr<EtcdClient>> Create(EtcdClientOptions options);

  absl::StatusOr<etcdserverpb::RangeResponse> Range(const etcdserverpb::RangeRequest& request);
  absl::StatusOr<etcdserverpb::PutResponse> Put(const etcdserverpb::PutRequest& request);
  absl::StatusOr<etcdserverpb::DeleteRangeResponse> DeleteRange(
      const etcdserverpb::DeleteRangeRequest& request);
  absl::StatusOr<etcdserverpb::TxnResponse> Txn(const etcdserverpb::TxnRequest& request);

  // ttl_s: what etcd grants may be longer (it has a minimum), never shorter; see the answer.
  absl::StatusOr<etcdserverpb::LeaseGrantResponse> LeaseGrant(int64_t ttl_s);
  absl::Status LeaseRevoke(int64_t lease_id);
  // One keepalive on a fresh stream. The answer's TTL is <= 0 when the lease is gone.
  absl::StatusOr<etcdserverpb::LeaseKeepAliveResponse> LeaseKeepAlive(int64_t lease_id);
  absl::StatusOr<etcdserverpb::LeaseTimeToLiveResponse> LeaseTimeToLive(int64_t lease_id);

  // Watches `key` from `start_revision` for up to `timeout_ms` and returns the first batch
  // of events (or the compaction that prevents it); an empty result when none came in time.
  // UNAVAILABLE when no member could be reached.
  absl::StatusOr<EtcdWatchResult> WatchOnce(const std::string& key, int64_t start_revision,
                                            int64_t timeout_ms);

  const std::vector<std::string>& endpoints() const { return endpoints_; }

 private:
  struct Member {
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<etcdserverpb::KV::Stub> kv;
    std::unique_ptr<etcdserverpb::Watch::Stub> watch;
    std::unique_ptr<etcdserverpb::Lease::Stub> lease;
  };

  EtcdClient(std::vector<std::string> endpoints, int64_t call_timeout_ms, const TlsFiles& tls);

  // Runs `attempt` against the current member, then the next ones while they answer
  // UNAVAILABLE, until `timeout_ms` (from the call) runs out. `what` names the
  // call in errors.
  absl::Status WithFailover(
      absl::string_view what, int64_t timeout_ms,
      const std::function<grpc::Status(Member&, grpc::ClientContext&)>& attempt);

  std::vector<std::string> endpoints_;
  std::vector<Member> members_;
  int64_t call_timeout_ms_;
  // The member the next call starts at: the last one that answered.
  std::atomic<size_t> current_{0};
};

}  // namespace eonce

#endif  // EONCE_COMMON_COORD_ETCD_CLIENT_H_
