// EtcdCluster: real etcd members on loopback for the coordination tests.
//
// Start runs 1 or 3 members of /usr/bin/etcd (installed by tools/setup.sh; a test that
// cannot find it fails rather than skips), each on two free loopback ports (client, peer),
// with its data dir in a fresh test directory and fsync left on, and waits until every
// member answers a linearizable read. A member can be killed (SIGKILL), stopped and
// continued (SIGSTOP/SIGCONT) and restarted on its data dir and ports. Every wait is
// bounded. The destructor kills the members and removes their data.
//
// Not thread-safe: the test's main thread drives it.
#ifndef EONCE_TESTS_UTIL_ETCD_CLUSTER_H_
#define EONCE_TESTS_UTIL_ETCD_CLUSTER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/rpc/tls.h"
#include "tests/util/process.h"

namespace eonce::testing {

inline constexpr char kEtcdBinary[] = "/usr/bin/etcd";
inline constexpr char kEtcdctlBinary[] = "/usr/bin/etcdctl";

// Client TLS for a cluster: the members' certificate (and the CA they require client
// certificates from), and a client's, for the readiness probe.
struct EtcdTls {
  TlsFiles server;
  TlsFiles client;
};

class EtcdCluster {
 public:
  // `members`: 1 or 3. With `tls`, clients must connect with mutual TLS (peers talk
  // plaintext). UNAVAILABLE (naming the member's log) when one does not come up within
  // `timeout_ms`.
  static absl::StatusOr<std::unique_ptr<EtcdCluster>> Start(int members,
                                                           int64_t timeout_ms = 60'000,
                                                           const EtcdTls* tls = nullptr);
  ~EtcdCluster();

  int size() const { return static_cast<int>(members_.size()); }
  // The client endpoints of every member, as --etcd_endpoints takes them ("a:1,b:2").
  std::string Endpoints() const;
  // host:port of one member's client port.
  std::string ClientAddress(int member) const;
  const std::string& LogPath(int member) const { return members_[member].log_path; }

  void Kill(int member);
  void Stop(int member);
  void Continue(int member);
  // Starts a killed member again on its data dir and ports and waits until it answers.
  absl::Status Restart(int member, int64_t timeout_ms = 60'000);
  // Waits until `member` answers a linearizable read (it has a leader).
  absl::Status WaitHealthy(int member, int64_t timeout_ms = 60'000);
  // Compacts the history up to `revision` (etcdctl compact): older revisions can no longer
  // be watched.
  absl::Status Compact(int64_t revision);

 private:
  struct Member {
    std::string name;
    int client_port = 0;
    int peer_port = 0;
    std::string data_dir;
    std::string log_path;
    std::unique_ptr<Process> process;
  };

  EtcdCluster() = default;
  absl::Status Launch(int member);

  std::string dir_;
  std::string initial_cluster_;
  std::string token_;
  EtcdTls tls_;
  bool with_tls_ = false;
  std::vector<Member> members_;
};

}  // namespace eonce::testing

#endif  // EONCE_TESTS_UTIL_ETCD_CLUSTER_H_
