#include "services/inbox/embedded_sidecar.h"

namespace eonce {

absl::StatusOr<std::unique_ptr<EmbeddedSidecar>> EmbeddedSidecar::Start(
    const EmbeddedSidecarOptions& options, Inbox& inbox,
    std::map<std::string, InboxUpstream::Handler> handlers, Clock& clock) {
  if (options.listen_address.empty() || options.data_dir.empty()) {
    return absl::InvalidArgumentError(
        "sidecar_listen, sidecar_data_dir: an embedded sidecar needs both");
  }
  std::unique_ptr<EmbeddedSidecar> embedded(new EmbeddedSidecar());
  embedded->listen_address_ = options.listen_address;
  embedded->upstream_ = std::make_unique<InboxUpstream>(inbox, std::move(handlers), clock);
  SidecarServerOptions sidecar;
  sidecar.listen_address = options.listen_address;
  sidecar.data_dir = options.data_dir;
  sidecar.policy_file = options.policy_file;
  sidecar.metrics_address = options.metrics_address;
  sidecar.shard_id = options.shard_id;
  sidecar.etcd_endpoints = options.etcd_endpoints;
  sidecar.etcd_prefix = options.etcd_prefix;
  sidecar.lease_ttl_ms = options.lease_ttl_ms;
  // The business is this process's own: its rows move with its slots.
  sidecar.move_business_data = !options.shard_id.empty();
  sidecar.tls = options.tls;
  sidecar.insecure = options.insecure;
  sidecar.listen_flag = "sidecar_listen";
  sidecar.upstream = embedded->upstream_.get();
  auto started = SidecarServer::Start(sidecar, clock);
  if (!started.ok()) return started.status();
  embedded->sidecar_ = std::move(*started);
  return embedded;
}


}  // namespace eonce
