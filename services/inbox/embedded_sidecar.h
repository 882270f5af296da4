// EmbeddedSidecar: the dedupe sidecar run inside a business built on services/inbox
// (InboxUpstream): callers reach the sidecar's port, and the sidecar calls the business's
// handlers directly — one gRPC hop per command instead of two, with the same records,
// policy, audit log, slot gate and commit point (the inbox) as the sidecar's own binary.
// Settings not named here take the sidecar's defaults.
#ifndef EONCE_SERVICES_INBOX_EMBEDDED_SIDECAR_H_
#define EONCE_SERVICES_INBOX_EMBEDDED_SIDECAR_H_

#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/base/clock.h"
#include "common/rpc/tls.h"
#include "dedupe_sidecar/doors/sidecar_service.h"
#include "services/inbox/inbox_upstream.h"
#include "services/inbox/service_host.h"

namespace eonce {

struct EmbeddedSidecarOptions {
  std::string listen_address;  // required: where callers (agents) reach it
  std::string data_dir;        // required: its own RocksDB, apart from the business's
  std::string policy_file;
  std::string metrics_address;
  // Sharding: with a shard id, the slot gate runs on the map and lease in etcd, and a slot
  // move takes the business's rows too.
  std::string shard_id;
  std::string etcd_endpoints;
  std::string etcd_prefix = "/eonce/default";
  int64_t lease_ttl_ms = 10'000;
  TlsFiles tls;
  // --insecure: the sidecar's listener may be plaintext on an address other hosts reach.
  bool insecure = false;
};

class EmbeddedSidecar : public Companion {
 public:
  static absl::StatusOr<std::unique_ptr<EmbeddedSidecar>> Start(
      const EmbeddedSidecarOptions& options, Inbox& inbox,
      std::map<std::string, InboxUpstream::Handler> handlers, Clock& clock);

  int port() const override { return sidecar_->port(); }
  const std::string& listen_address() const override { return listen_address_; }
  absl::Status Shutdown(int64_t drain_ms) override { return sidecar_->Shutdown(drain_ms); }
  SidecarServer& sidecar() { return *sidecar_; }

 private:
  EmbeddedSidecar() = default;
  std::string listen_address_;
  std::unique_ptr<InboxUpstream> upstream_;  // outlives the sidecar that calls it
  std::unique_ptr<SidecarServer> sidecar_;
};

}  // namespace eonce

#endif  // EONCE_SERVICES_INBOX_EMBEDDED_SIDECAR_H_
