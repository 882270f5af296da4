// ledger_service: the reference ledger behind a dedupe sidecar, or with the sidecar in
// its own process (--sidecar_listen).
#include "absl/flags/flag.h"
#include "common/base/clock.h"
#include "common/rpc/server_flags.h"
#include "services/inbox/embedded_sidecar.h"
#include "services/inbox/service_host.h"
#include "services/ledger/ledger_in_process.h"
#include "services/ledger/ledger_service.h"

ABSL_FLAG(bool, cross_slot_credits, false,
          "sharded: a transfer to an account of another slot debits here and sends a Credit "
          "through the outbox (a relay must run: outbox_agent --relay_from)");
ABSL_FLAG(uint64_t, account_cache_entries, eonce::AccountCache::kDefaultEntries,
          "accounts kept in memory as last written, so that a transfer reads them without a "
          "search of the store (at most 16777216; 0: none)");
ABSL_FLAG(std::string, sidecar_listen, "",
          "run the dedupe sidecar in this process, callers reaching it here (one hop instead "
          "of two; an address other hosts reach needs mutual TLS or --insecure). --listen is "
          "then the business's own door, for eonce components and operators: a unix socket "
          "(default unix:<data_dir>/business.sock) or mutual TLS; empty: none");
ABSL_FLAG(std::string, sidecar_data_dir, "", "the embedded sidecar's RocksDB directory");
ABSL_FLAG(std::string, sidecar_policy_file, "", "the embedded sidecar's policy file");
ABSL_FLAG(std::string, sidecar_metrics_listen, "", "the embedded sidecar's Prometheus endpoint");
ABSL_FLAG(std::string, sidecar_shard_id, "", "sharded: the embedded sidecar's shard");
ABSL_FLAG(std::string, sidecar_etcd_endpoints, "",
          "sharded: the etcd cluster (comma list) that holds the slot map and the shard's lease");
ABSL_FLAG(std::string, sidecar_etcd_prefix, "/eonce/default",
          "sharded: the deployment's key prefix in etcd");
ABSL_FLAG(int64_t, sidecar_lease_ttl_ms, 10'000, "sharded: the shard lease's TTL");

int main(int argc, char** argv) {
  eonce::LedgerCore* core = nullptr;
  auto options = [] {
    eonce::LedgerOptions options;
    options.cross_slot_credits = absl::GetFlag(FLAGS_cross_slot_credits);
    options.account_cache_entries = absl::GetFlag(FLAGS_account_cache_entries);
    return options;
  };
  eonce::CompanionSpec sidecar;
  sidecar.wanted = [] { return !absl::GetFlag(FLAGS_sidecar_listen).empty(); };
  sidecar.start = [&core](eonce::ServiceHost& host)
      -> absl::StatusOr<std::unique_ptr<eonce::Companion>> {
    eonce::EmbeddedSidecarOptions o;
    o.listen_address = absl::GetFlag(FLAGS_sidecar_listen);
    o.data_dir = absl::GetFlag(FLAGS_sidecar_data_dir);
    o.policy_file = absl::GetFlag(FLAGS_sidecar_policy_file);
    o.metrics_address = absl::GetFlag(FLAGS_sidecar_metrics_listen);
    o.shard_id = absl::GetFlag(FLAGS_sidecar_shard_id);
    o.etcd_endpoints = absl::GetFlag(FLAGS_sidecar_etcd_endpoints);
    o.etcd_prefix = absl::GetFlag(FLAGS_sidecar_etcd_prefix);
    o.lease_ttl_ms = absl::GetFlag(FLAGS_sidecar_lease_ttl_ms);
    const eonce::ServerFlags shared = eonce::ServerFlagsFromFlags();
    o.tls = shared.tls;
    o.insecure = shared.insecure;
    auto started = eonce::EmbeddedSidecar::Start(o, host.inbox(), eonce::LedgerHandlers(*core),
                                                 eonce::RealClock::Get());
    if (!started.ok()) return started.status();
    return std::unique_ptr<eonce::Companion>(std::move(*started));
  };
  return eonce::RunServiceMain(argc, argv, "ledger_service", "127.0.0.1:7101",
                               eonce::LedgerCore::ColumnFamilies(),
                               eonce::LedgerSetup(options, &core), sidecar);
}
