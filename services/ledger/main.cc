// ledger_service: the reference ledger behind a dedupe sidecar.
#include <iostream>

#include "absl/flags/flag.h"
#include "common/chance_faults.h"
#include "common/clock.h"
#include "common/random.h"
#include "common/log.h"
#include "common/server.h"
#include "services/ledger/ledger_service.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:7101",
          "address to serve on: host:port or unix:/path (the pod's localhost only)");
ABSL_FLAG(std::string, data_dir, "", "RocksDB data directory (required)");
ABSL_FLAG(bool, legacy, false,
          "legacy mode: no inbox and no Outcome service; every call applies");
ABSL_FLAG(int64_t, drain_ms, 5000, "how long in-flight calls may finish on SIGTERM");
ABSL_FLAG(double, lose_answer_ratio, 0.0,
          "chaos: the share of applied calls whose answer is lost (UNAVAILABLE after the "
          "effect is durable); for demos and fault tests");
ABSL_FLAG(uint64_t, fault_seed, 1, "chaos: the seed of lose_answer_ratio's draws");

int main(int argc, char** argv) {
  eonce::BlockShutdownSignals();
  eonce::ParseFlagsWithEnv(argc, argv, "ledger_service --data_dir=DIR [--listen=ADDR]");
  eonce::LedgerServerOptions options;
  options.listen_address = absl::GetFlag(FLAGS_listen);
  options.data_dir = absl::GetFlag(FLAGS_data_dir);
  options.legacy_mode = absl::GetFlag(FLAGS_legacy);
  if (options.data_dir.empty()) {
    std::cerr << "ledger_service: setting data_dir is required\n";
    return 2;
  }
  eonce::SeededRandom fault_random(absl::GetFlag(FLAGS_fault_seed));
  eonce::ChanceFaults faults(fault_random, absl::UnavailableError("answer lost (chaos)"));
  double lose = absl::GetFlag(FLAGS_lose_answer_ratio);
  if (lose < 0 || lose > 1) {
    std::cerr << "ledger_service: setting lose_answer_ratio must be in [0, 1]\n";
    return 2;
  }
  if (lose > 0) {
    faults.Arm(eonce::FaultPoint::kAfterApplyBeforeResponse, lose);
    options.faults = &faults;
  }
  auto server = eonce::LedgerServer::Start(options, eonce::RealClock::Get());
  if (!server.ok()) {
    std::cerr << "ledger_service: " << server.status() << "\n";
    return 1;
  }
  eonce::AnnounceListening("ledger_service", options.listen_address, (*server)->port());
  eonce::LogInfo("started", {{"service", "ledger"},
                             {"legacy", options.legacy_mode ? "true" : "false"}});
  eonce::WaitForShutdownSignal();
  eonce::LogInfo("draining", {{"service", "ledger"}});
  absl::Status closed = (*server)->Shutdown(absl::GetFlag(FLAGS_drain_ms));
  if (!closed.ok()) {
    eonce::LogError("close failed", {{"error", closed.ToString()}});
    return 1;
  }
  return 0;
}
