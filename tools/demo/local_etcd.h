// LocalEtcd: the one etcd member `eonce demo --shards N` runs on loopback, its data in the
// run's folder, holding the slot map and the shards' leases (common/coord). The demo
// without shards runs none.
#ifndef EONCE_TOOLS_DEMO_LOCAL_ETCD_H_
#define EONCE_TOOLS_DEMO_LOCAL_ETCD_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/coord/etcd_map_store.h"
#include "tests/util/process.h"

namespace eonce::demo {

inline constexpr char kDemoEtcdPrefix[] = "/eonce/demo";

class LocalEtcd {
 public:
  // Starts /usr/bin/etcd with its data under `dir` and waits (up to 30 s) until it answers.
  static absl::StatusOr<std::unique_ptr<LocalEtcd>> Start(const std::string& dir);
  ~LocalEtcd();

  const std::string& endpoint() const { return endpoint_; }
  MapStore& store() { return coordination_->store(); }

 private:
  LocalEtcd() = default;
  std::string endpoint_;
  std::unique_ptr<Process> process_;
  std::unique_ptr<EtcdCoordination> coordination_;
};

}  // namespace eonce::demo

#endif  // EONCE_TOOLS_DEMO_LOCAL_ETCD_H_
