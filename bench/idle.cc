#include "bench/idle.h"

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/loops.h"
#include "common/base/status.h"
#include "tests/util/process.h"

namespace eonce::bench {

absl::Status BenchIdleSidecar(const std::string& bin_dir, const std::string& dir,
                              double settle_seconds, double seconds, IdleFigures* out) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) return absl::InternalError(absl::StrCat("mkdir ", dir, ": ", error.message()));
  EONCE_ASSIGN_OR_RETURN(
      auto ledger, Process::Start(bin_dir + "/services/ledger/ledger_service",
                                  {"--listen=127.0.0.1:0", "--data_dir=" + dir + "/ledger"},
                                  dir + "/ledger.log"));
  EONCE_ASSIGN_OR_RETURN(
      auto sidecar, Process::Start(bin_dir + "/dedupe_sidecar/dedupe_sidecar",
                                   {"--listen=127.0.0.1:0", "--data_dir=" + dir + "/sidecar",
                                    "--upstream=" + ledger->address()},
                                   dir + "/sidecar.log"));
  EONCE_ASSIGN_OR_RETURN(
      auto agent, Process::Start(bin_dir + "/outbox_agent/outbox_agent",
                                 {"--listen=127.0.0.1:0", "--data_dir=" + dir + "/agent",
                                  "--tenant=bench", "--sidecar=" + sidecar->address()},
                                 dir + "/agent.log"));
  std::this_thread::sleep_for(std::chrono::duration<double>(settle_seconds));
  const int64_t sidecar_before = ReadProcessCpuTicks(sidecar->pid());
  const int64_t ledger_before = ReadProcessCpuTicks(ledger->pid());
  const int64_t agent_before = ReadProcessCpuTicks(agent->pid());
  const auto start = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  const int64_t sidecar_after = ReadProcessCpuTicks(sidecar->pid());
  const int64_t ledger_after = ReadProcessCpuTicks(ledger->pid());
  const int64_t agent_after = ReadProcessCpuTicks(agent->pid());
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (sidecar_before < 0 || sidecar_after < 0 || ledger_before < 0 || ledger_after < 0 ||
      agent_before < 0 || agent_after < 0) {
    return absl::InternalError("the idle sidecar, its ledger or the agent exited while measured");
  }
  const double ticks_per_s = static_cast<double>(sysconf(_SC_CLK_TCK));
  out->seconds = elapsed;
  out->sidecar_core_pct = 100.0 * (sidecar_after - sidecar_before) / ticks_per_s / elapsed;
  out->ledger_core_pct = 100.0 * (ledger_after - ledger_before) / ticks_per_s / elapsed;
  out->agent_core_pct = 100.0 * (agent_after - agent_before) / ticks_per_s / elapsed;
  return absl::OkStatus();
}

std::string IdleJson(const IdleFigures& f) {
  return absl::StrFormat(
      "{\"seconds\": %.1f, \"sidecar_core_pct\": %.3f, \"ledger_core_pct\": %.3f, "
      "\"agent_core_pct\": %.3f}",
      f.seconds, f.sidecar_core_pct, f.ledger_core_pct, f.agent_core_pct);
}

std::string IdleText(const IdleFigures& f) {
  if (f.seconds <= 0) return "";
  return absl::StrFormat(
      "idle, no traffic for %.0f s: the sidecar used %.2f%% of one core, its ledger %.2f%%, "
      "an agent with an empty outbox %.2f%%\n",
      f.seconds, f.sidecar_core_pct, f.ledger_core_pct, f.agent_core_pct);
}

}  // namespace eonce::bench
