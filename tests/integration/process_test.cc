// The real binaries as processes: they start, refuse bad configuration naming the
// setting, and exit 0 after a graceful drain on SIGTERM.
#include <signal.h>
#include <sys/wait.h>

#include <cstdio>
#include <string>

#include "gtest/gtest.h"
#include "tests/util/process.h"
#include "tests/util/temp_dir.h"

namespace eonce {
namespace {

struct Ran {
  int exit_code;
  std::string out;
};

Ran RunToEnd(const std::string& command) {
  Ran ran{-1, ""};
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) ran.out.append(buffer, n);
  int status = pclose(pipe);
  ran.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return ran;
}

TEST(ProcessTest, BadConfigurationFailsAtStartupNamingTheSetting) {
  std::string dir = testing::FreshDir("bad");
  Ran lease = RunToEnd("dedupe_sidecar/dedupe_sidecar --data_dir=" + dir +
                       " --lease_ms=100 --forward_timeout_ms=5000 --listen=127.0.0.1:0");
  EXPECT_EQ(lease.exit_code, 2) << lease.out;
  EXPECT_NE(lease.out.find("lease_ms"), std::string::npos) << lease.out;
  // Longer than the forward, but not than a recovery (outcome query, then forward).
  Ran recovery = RunToEnd("dedupe_sidecar/dedupe_sidecar --data_dir=" + dir +
                          " --lease_ms=6000 --forward_timeout_ms=5000 --listen=127.0.0.1:0");
  EXPECT_EQ(recovery.exit_code, 2) << recovery.out;
  EXPECT_NE(recovery.out.find("raise --lease_ms to at least 7500"), std::string::npos)
      << recovery.out;
  // A claim covers a reconcile and a submit.
  Ran claim = RunToEnd("outbox_agent/outbox_agent --tenant=acme --data_dir=" + dir +
                       "/agent --submit_timeout_ms=2000 --claim_ttl_ms=3000");
  EXPECT_EQ(claim.exit_code, 2) << claim.out;
  EXPECT_NE(claim.out.find("raise --claim_ttl_ms to at least 4500"), std::string::npos)
      << claim.out;
  Ran no_dir = RunToEnd("outbox_agent/outbox_agent --tenant=acme");
  EXPECT_EQ(no_dir.exit_code, 2);
  EXPECT_NE(no_dir.out.find("data_dir"), std::string::npos) << no_dir.out;
  Ran env = RunToEnd("EONCE_LOSE_ANSWER_RATIO=2 services/ledger/ledger_service --data_dir=" + dir);
  EXPECT_EQ(env.exit_code, 2);
  EXPECT_NE(env.out.find("lose_answer_ratio"), std::string::npos) << env.out;
  Ran reserve =
      RunToEnd("outbox_agent/outbox_agent --tenant=acme --min_free_mb=-1 --data_dir=" + dir);
  EXPECT_EQ(reserve.exit_code, 2);
  EXPECT_NE(reserve.out.find("min_free_mb"), std::string::npos) << reserve.out;
  Ran tls = RunToEnd("dedupe_sidecar/dedupe_sidecar --data_dir=" + dir +
                     " --listen=127.0.0.1:0 --tls_cert=/nonexistent.pem");
  EXPECT_EQ(tls.exit_code, 2);
  EXPECT_NE(tls.out.find("tls_key"), std::string::npos) << tls.out;
  Ran help = RunToEnd("dedupe_sidecar/dedupe_sidecar --helpfull");
  EXPECT_NE(help.out.find("--retention_ms"), std::string::npos) << help.out;
}

TEST(ProcessTest, EveryServerDrainsAndExitsZeroOnSigterm) {
  std::string dir = testing::FreshDir("procs");
  auto ledger = Process::Start("services/ledger/ledger_service",
                               {"--listen=127.0.0.1:0", "--data_dir=" + dir + "/ledger"},
                               dir + "/ledger.log");
  ASSERT_TRUE(ledger.ok()) << ledger.status();
  auto sidecar = Process::Start("dedupe_sidecar/dedupe_sidecar",
                                {"--listen=127.0.0.1:0", "--data_dir=" + dir + "/sidecar",
                                 "--upstream=" + (*ledger)->address(), "--drain_ms=1000"},
                                dir + "/sidecar.log");
  ASSERT_TRUE(sidecar.ok()) << sidecar.status();
  auto agent = Process::Start("outbox_agent/outbox_agent",
                              {"--listen=127.0.0.1:0", "--data_dir=" + dir + "/agent",
                               "--tenant=acme", "--sidecar=" + (*sidecar)->address(),
                               "--drain_ms=1000"},
                              dir + "/agent.log");
  ASSERT_TRUE(agent.ok()) << agent.status();
  for (Process* p : {agent->get(), sidecar->get(), ledger->get()}) {
    int status = p->Signal(SIGTERM, /*wait=*/true);
    EXPECT_TRUE(WIFEXITED(status)) << p->address();
    EXPECT_EQ(WEXITSTATUS(status), 0) << p->address();
  }
}

}  // namespace
}  // namespace eonce
