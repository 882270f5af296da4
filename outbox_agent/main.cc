// outbox_agent: durable intent beside a producing service.
#include <algorithm>
#include <iostream>

#include "absl/flags/flag.h"
#include "common/base/clock.h"
#include "common/base/flags.h"
#include "common/base/log.h"
#include "common/base/random.h"
#include "common/rpc/server.h"
#include "common/rpc/server_flags.h"
#include "outbox_agent/doors/agent_server.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:7000",
          "address producers call: host:port or unix:/path. An address other hosts can reach "
          "needs mutual TLS (--tls_cert, --tls_key, --tls_ca) or --insecure");
ABSL_FLAG(std::string, data_dir, "", "RocksDB outbox directory (required)");
ABSL_FLAG(std::string, tenant, "", "the tenant this agent's producer acts for (required)");
ABSL_FLAG(std::string, actor, "",
          "the actor the agent states for commands that name none; empty: none (the workload "
          "its certificate names acts as itself)");
ABSL_FLAG(int64_t, credential_epoch, 1, "the credential epoch on first start");
ABSL_FLAG(std::string, credential_file, "",
          "file with epoch=N and revoked=BOOL lines; a change renews or revokes at once");
ABSL_FLAG(std::string, sidecar, "127.0.0.1:7100", "the default sidecar address");
ABSL_FLAG(std::string, routes, "",
          "service=address pairs, comma separated, e.g. eonce.ledger.v1.Ledger=10.0.0.1:7100; "
          "service=sharded:address routes a sharded service by the slot map that sidecar serves");
ABSL_FLAG(bool, batch_submits, true,
          "send the attempts in flight to one sidecar as SubmitBatch calls (one call's cost "
          "for many commands); false: one Submit per attempt");
ABSL_FLAG(int32_t, max_in_flight, eonce::ReplayerOptions().max_in_flight,
          "attempts in flight at once, in all rounds (at most one per entity; at most 4096); "
          "the default is two rounds of --max_round, one per SubmitBatch call in flight to a "
          "sidecar: one round's claim is synced while the other is at the sidecar");
ABSL_FLAG(int32_t, max_round, eonce::ReplayerOptions().max_round,
          "attempts one replay round claims in one synced write and sends together (64 fill "
          "one SubmitBatch call); at least 1, and taken as --max_in_flight when above it. "
          "Rounds follow one another while attempt slots are free, so --max_in_flight / "
          "--max_round rounds can be in flight at once");
ABSL_FLAG(int64_t, max_idle_wait_ms, eonce::AgentServerOptions().max_idle_wait_ms,
          "the longest the replay loop sleeps when nothing wakes it: an Enqueue, an answer or "
          "a new credential wake it at once, and it sleeps until the outbox's next due time "
          "(a retry) or its periodic work (each second), at most this long");
ABSL_FLAG(int32_t, max_attempts, 100, "attempts before a record is dead-lettered");
ABSL_FLAG(int64_t, max_age_ms, 6LL * 24 * 3600 * 1000,
          "age at which a record is dead-lettered; must be below the sidecar retention");
ABSL_FLAG(int64_t, retention_margin_ms, 12LL * 3600 * 1000,
          "stop sending this long before the sidecar's retention ends");
ABSL_FLAG(int64_t, base_backoff_ms, 100, "first retry delay ceiling");
ABSL_FLAG(int64_t, max_backoff_ms, 30'000, "largest retry delay");
ABSL_FLAG(int64_t, parked_recheck_ms, 60'000,
          "how often a command parked at the sidecar (unknown outcome) is asked about again");
ABSL_FLAG(int64_t, submit_timeout_ms, 10'000, "deadline of one Submit");
ABSL_FLAG(int64_t, claim_ttl_ms, 30'000, "how long a claim lasts before it is taken over");
ABSL_FLAG(int64_t, max_pending_records, 1'000'000, "waiting records before Enqueue refuses");
ABSL_FLAG(int64_t, forensic_retention_ms, 30LL * 24 * 3600 * 1000,
          "how long final records are kept");
ABSL_FLAG(int64_t, max_request_bytes, 1 << 20, "largest request message");
ABSL_FLAG(std::string, metrics_listen, "",
          "Prometheus endpoint, host:port (e.g. 0.0.0.0:9102), plaintext on any address (it "
          "reveals no identity-bearing data); empty: no endpoint");
ABSL_FLAG(std::string, relay_from, "",
          "a business's address (in the pod) whose follow-up commands (its transactional "
          "outbox, eonce.v1.FollowUps) this agent relays for its tenant; empty: none");
ABSL_FLAG(int64_t, drain_ms, 10'000, "how long in-flight work may finish on SIGTERM");

int main(int argc, char** argv) {
  eonce::BlockShutdownSignals();
  eonce::ParseFlags(argc, argv,
                    {"outbox_agent --data_dir=DIR --tenant=T [--sidecar=ADDR]",
                     /*from_environment=*/true});
  eonce::AgentServerOptions o;
  o.listen_address = absl::GetFlag(FLAGS_listen);
  o.data_dir = absl::GetFlag(FLAGS_data_dir);
  o.tenant = absl::GetFlag(FLAGS_tenant);
  o.actor = absl::GetFlag(FLAGS_actor);
  o.initial_epoch = absl::GetFlag(FLAGS_credential_epoch);
  o.credential_file = absl::GetFlag(FLAGS_credential_file);
  o.default_sidecar = absl::GetFlag(FLAGS_sidecar);
  o.routes = absl::GetFlag(FLAGS_routes);
  o.batch_submits = absl::GetFlag(FLAGS_batch_submits);
  o.limits.max_request_bytes = static_cast<size_t>(absl::GetFlag(FLAGS_max_request_bytes));
  o.store.max_pending_records = absl::GetFlag(FLAGS_max_pending_records);
  o.store.forensic_retention_ms = absl::GetFlag(FLAGS_forensic_retention_ms);
  o.replay.max_in_flight = absl::GetFlag(FLAGS_max_in_flight);
  // The default round (64) must not make a small --max_in_flight an error.
  o.replay.max_round = std::min(absl::GetFlag(FLAGS_max_round), o.replay.max_in_flight);
  o.max_idle_wait_ms = absl::GetFlag(FLAGS_max_idle_wait_ms);
  o.replay.submit_timeout_ms = absl::GetFlag(FLAGS_submit_timeout_ms);
  o.replay.claim_ttl_ms = absl::GetFlag(FLAGS_claim_ttl_ms);
  o.replay.retry.max_attempts = absl::GetFlag(FLAGS_max_attempts);
  o.replay.retry.max_age_ms = absl::GetFlag(FLAGS_max_age_ms);
  o.replay.retry.retention_margin_ms = absl::GetFlag(FLAGS_retention_margin_ms);
  o.replay.retry.base_backoff_ms = absl::GetFlag(FLAGS_base_backoff_ms);
  o.replay.retry.max_backoff_ms = absl::GetFlag(FLAGS_max_backoff_ms);
  o.replay.retry.parked_recheck_ms = absl::GetFlag(FLAGS_parked_recheck_ms);
  o.metrics_address = absl::GetFlag(FLAGS_metrics_listen);
  o.relay_from = absl::GetFlag(FLAGS_relay_from);
  eonce::ServerFlags shared = eonce::ServerFlagsFromFlags();
  o.tls = shared.tls;
  o.health_address = shared.health_address;
  o.min_free_bytes = shared.min_free_bytes;
  o.insecure = shared.insecure;
  if (o.data_dir.empty() || o.tenant.empty()) {
    std::cerr << "outbox_agent: settings data_dir and tenant are required\n";
    return 2;
  }
  auto server = eonce::AgentServer::Start(o, eonce::RealClock::Get(), eonce::RealRandom::Get());
  if (!server.ok()) {
    std::cerr << "outbox_agent: " << server.status().message() << "\n";
    return server.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  eonce::AnnounceListening("outbox_agent", o.listen_address, (*server)->port());
  eonce::LogInfo("started", {{"service", "agent"}, {"tenant", o.tenant}});
  eonce::WaitForShutdownSignal();
  eonce::ExitOnSecondSignal();
  eonce::LogInfo("draining", {{"service", "agent"}});
  absl::Status closed = (*server)->Shutdown(absl::GetFlag(FLAGS_drain_ms));
  if (!closed.ok()) {
    eonce::LogError("close failed", {{"error", std::string(closed.message())}});
    return 1;
  }
  return 0;
}
