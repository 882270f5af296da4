// dedupe_sidecar: the idempotency boundary in front of a business service.
#include <iostream>

#include "absl/flags/flag.h"
#include "common/base/clock.h"
#include "common/coord/etcd_flags.h"
#include "common/base/flags.h"
#include "common/base/log.h"
#include "common/rpc/server.h"
#include "common/rpc/server_flags.h"
#include "dedupe_sidecar/doors/sidecar_service.h"

ABSL_FLAG(std::string, listen, "0.0.0.0:7100",
          "address agents call: host:port or unix:/path. An address other hosts can reach "
          "(the default) needs mutual TLS (--tls_cert, --tls_key, --tls_ca) or --insecure; "
          "127.0.0.1 and unix sockets need neither");
ABSL_FLAG(std::string, upstream, "127.0.0.1:7101",
          "the business service: unix:/path (the pod's own socket, no TLS) or host:port");
ABSL_FLAG(std::string, data_dir, "", "RocksDB data directory (required)");
ABSL_FLAG(std::string, policy_file, "",
          "authorization policy; reloaded when it changes (required with mutual TLS; without "
          "it, on a local listener, everything keyed is allowed)");
ABSL_FLAG(int64_t, retention_ms, 7LL * 24 * 3600 * 1000,
          "how long a finished record answers duplicates (7 days)");
ABSL_FLAG(int64_t, forensic_retention_ms, 30LL * 24 * 3600 * 1000,
          "how long a tombstone catches late conflicts (30 days)");
ABSL_FLAG(int64_t, audit_retention_ms, 90LL * 24 * 3600 * 1000, "audit log retention (90 days)");
ABSL_FLAG(int64_t, lease_ms, 10'000,
          "how long a started record blocks duplicates; at least outcome_query_timeout_ms + "
          "forward_timeout_ms + 500");
ABSL_FLAG(int64_t, forward_timeout_ms, 5'000, "the longest a forward may take");
ABSL_FLAG(int64_t, outcome_query_timeout_ms, 2'000,
          "the longest a QueryOutcome to the business may take");
ABSL_FLAG(int64_t, max_key_bytes, 256, "longest idempotency key");
ABSL_FLAG(int64_t, max_request_bytes, 1 << 20, "largest request message");
ABSL_FLAG(bool, business_commit_point, true,
          "let the business's inbox be the commit point for the methods whose answers say it "
          "keeps the outcome (eonce-inbox: kept), so the sidecar skips its own fsyncs there; "
          "false: sync as for a legacy business (docs/design.md)");
ABSL_FLAG(bool, replay_after_revocation, false,
          "answer duplicates of commands finished before a revocation with the stored answer "
          "(a duplicate: the same command id and payload as the key's record; a new command "
          "under the key is denied)");
ABSL_FLAG(bool, refuse_unkeyed_mutations, true,
          "transparent mode: refuse calls without idempotency-key to methods the policy does "
          "not list readonly (false forwards them unkeyed, without dedupe)");
ABSL_FLAG(std::string, shard_id, "",
          "this sidecar's shard in the slot map; empty: not sharded (every command is taken)");
ABSL_FLAG(bool, move_business_data, false,
          "sharded, with a business of this shard's own (built on services/inbox): a slot "
          "move takes the business's rows of the slot too (eonce.v1.SlotData)");
ABSL_FLAG(std::string, instance_id, "sidecar", "this sidecar's name as a lease owner");
ABSL_FLAG(int32_t, max_in_flight, 1024,
          "calls in flight at once; past it calls are refused (RESOURCE_EXHAUSTED, OVERLOADED)");
ABSL_FLAG(int32_t, max_in_flight_per_tenant, 256,
          "calls of one tenant in flight at once (RESOURCE_EXHAUSTED, TENANT_OVERLOADED)");
ABSL_FLAG(int64_t, memory_quota_mb, 256, "memory gRPC may use for this server's calls");
ABSL_FLAG(int64_t, drain_ms, 10'000, "how long in-flight calls may finish on SIGTERM");
ABSL_FLAG(std::string, metrics_listen, "",
          "Prometheus endpoint, host:port (e.g. 0.0.0.0:9100), plaintext on any address (it "
          "reveals no identity-bearing data); empty: no endpoint");
ABSL_FLAG(int64_t, block_cache_mb, eonce::StoreOptions().block_cache_bytes >> 20,
          "memory for the records' data blocks: size it to the records that retries touch");
ABSL_FLAG(int64_t, finished_cache_mb, eonce::FinishedAnswers::kDefaultMaxBytes >> 20,
          "memory for the answers of the commands finished most recently, so that their "
          "retries are answered without a read of the store; 0: none");
ABSL_FLAG(bool, warm_cache, true,
          "at start, read the records into the block cache (up to 7/8 of it) in the "
          "background, so that the retries after a restart are answered from memory");
ABSL_FLAG(int32_t, forward_batch_calls, 4,
          "to a business that serves eonce.v1.Forwards: while this many calls are in flight, "
          "the forwards that arrive meanwhile go together in one call (0: one call each)");
ABSL_FLAG(int64_t, compaction_interval_ms, 0,
          "a forced full compaction this often (0: none; RocksDB's periodic compaction already "
          "rewrites every file at least every 6 hours, which drops what retention let go)");

int main(int argc, char** argv) {
  eonce::BlockShutdownSignals();
  eonce::ParseFlags(argc, argv,
                    {"dedupe_sidecar --data_dir=DIR --upstream=ADDR [--listen=ADDR]",
                     /*from_environment=*/true});
  eonce::SidecarServerOptions o;
  o.listen_address = absl::GetFlag(FLAGS_listen);
  o.upstream_address = absl::GetFlag(FLAGS_upstream);
  o.data_dir = absl::GetFlag(FLAGS_data_dir);
  o.policy_file = absl::GetFlag(FLAGS_policy_file);
  o.retention.retention_ms = absl::GetFlag(FLAGS_retention_ms);
  o.retention.forensic_retention_ms = absl::GetFlag(FLAGS_forensic_retention_ms);
  o.audit_retention_ms = absl::GetFlag(FLAGS_audit_retention_ms);
  o.deduper.lease_ms = absl::GetFlag(FLAGS_lease_ms);
  o.deduper.forward_timeout_ms = absl::GetFlag(FLAGS_forward_timeout_ms);
  o.deduper.outcome_query_timeout_ms = absl::GetFlag(FLAGS_outcome_query_timeout_ms);
  o.deduper.replay_after_revocation = absl::GetFlag(FLAGS_replay_after_revocation);
  o.deduper.business_commit_point = absl::GetFlag(FLAGS_business_commit_point);
  o.deduper.instance_id = absl::GetFlag(FLAGS_instance_id);
  o.deduper.limits.max_key_bytes = static_cast<size_t>(absl::GetFlag(FLAGS_max_key_bytes));
  o.deduper.limits.max_request_bytes = static_cast<size_t>(absl::GetFlag(FLAGS_max_request_bytes));
  o.max_message_bytes = static_cast<int>(o.deduper.limits.max_request_bytes) + (1 << 20);
  o.forward_batch_calls = absl::GetFlag(FLAGS_forward_batch_calls);
  o.refuse_unkeyed_mutations = absl::GetFlag(FLAGS_refuse_unkeyed_mutations);
  o.max_in_flight = absl::GetFlag(FLAGS_max_in_flight);
  o.max_in_flight_per_tenant = absl::GetFlag(FLAGS_max_in_flight_per_tenant);
  o.memory_quota_bytes = absl::GetFlag(FLAGS_memory_quota_mb) << 20;
  o.compaction_interval_ms = absl::GetFlag(FLAGS_compaction_interval_ms);
  o.warm_cache = absl::GetFlag(FLAGS_warm_cache);
  o.block_cache_bytes = static_cast<size_t>(absl::GetFlag(FLAGS_block_cache_mb)) << 20;
  o.finished_cache_bytes = static_cast<size_t>(absl::GetFlag(FLAGS_finished_cache_mb)) << 20;
  o.metrics_address = absl::GetFlag(FLAGS_metrics_listen);
  o.shard_id = absl::GetFlag(FLAGS_shard_id);
  const eonce::EtcdCoordOptions etcd = eonce::EtcdCoordOptionsFromFlags();
  o.etcd_endpoints = etcd.endpoints;
  o.etcd_prefix = etcd.prefix;
  o.lease_ttl_ms = etcd.lease_ttl_ms;
  o.etcd_timeout_ms = etcd.call_timeout_ms;
  o.etcd_tls = etcd.tls;
  o.move_business_data = absl::GetFlag(FLAGS_move_business_data);
  eonce::ServerFlags shared = eonce::ServerFlagsFromFlags();
  o.tls = shared.tls;
  o.health_address = shared.health_address;
  o.min_free_bytes = shared.min_free_bytes;
  o.insecure = shared.insecure;

  auto server = eonce::SidecarServer::Start(o, eonce::RealClock::Get());
  if (!server.ok()) {
    std::cerr << "dedupe_sidecar: " << server.status().message() << "\n";
    return server.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  eonce::AnnounceListening("dedupe_sidecar", o.listen_address, (*server)->port());
  eonce::LogInfo("started", {{"service", "sidecar"}, {"upstream", o.upstream_address}});
  eonce::WaitForShutdownSignal();
  eonce::ExitOnSecondSignal();
  eonce::LogInfo("draining", {{"service", "sidecar"}});
  absl::Status closed = (*server)->Shutdown(absl::GetFlag(FLAGS_drain_ms));
  if (!closed.ok()) {
    eonce::LogError("close failed", {{"error", std::string(closed.message())}});
    return 1;
  }
  return 0;
}
