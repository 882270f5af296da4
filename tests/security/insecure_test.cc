// Secure by default: a server on an address other hosts can reach needs mutual TLS, or
// --insecure, which it then says in its log at every start and in its metrics
// (eonce_insecure 1). Loopback and unix sockets need neither. The refusal of the real
// binaries (exit 2, the message naming the flags) is in tests/integration/flags_test.sh;
// here are the servers in process, and the binaries' warning.
#include <signal.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "common/base/clock.h"
#include "common/base/random.h"
#include "dedupe_sidecar/doors/sidecar_service.h"
#include "gtest/gtest.h"
#include "outbox_agent/doors/agent_server.h"
#include "services/ledger/ledger_service.h"
#include "tests/util/http_get.h"
#include "tests/util/process.h"
#include "tests/util/temp_dir.h"

namespace eonce {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The value of the eonce_insecure gauge at a metrics endpoint; "" when not exported.
std::string InsecureGauge(int metrics_port) {
  std::istringstream lines(testing::HttpGet(metrics_port, "/metrics"));
  std::string line;
  while (std::getline(lines, line)) {
    if (absl::StartsWith(line, "eonce_insecure ")) return line.substr(15);
  }
  return "";
}

void ExpectRefusal(const absl::Status& status, const std::string& flag) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  for (const std::string& named : {flag, std::string("--insecure"), std::string("--tls_cert"),
                                   std::string("--tls_key"), std::string("--tls_ca")}) {
    EXPECT_TRUE(absl::StrContains(status.message(), named)) << named << " in " << status;
  }
}

class InsecureTest : public ::testing::Test {
 protected:
  LedgerServerOptions Ledger(const std::string& listen, bool insecure) {
    LedgerServerOptions options;
    options.listen_address = listen;
    options.data_dir = testing::FreshDir("ledger");
    options.metrics_address = "127.0.0.1:0";
    options.insecure = insecure;
    return options;
  }
  SidecarServerOptions Sidecar(const std::string& listen, bool insecure) {
    SidecarServerOptions options;
    options.listen_address = listen;
    options.data_dir = testing::FreshDir("sidecar");
    options.upstream_address = "127.0.0.1:1";
    options.metrics_address = "127.0.0.1:0";
    options.insecure = insecure;
    return options;
  }
  AgentServerOptions Agent(const std::string& listen, bool insecure) {
    AgentServerOptions options;
    options.listen_address = listen;
    options.data_dir = testing::FreshDir("agent");
    options.tenant = "acme";
    options.default_sidecar = "127.0.0.1:1";
    options.startup_info_wait_ms = 0;
    options.metrics_address = "127.0.0.1:0";
    options.insecure = insecure;
    return options;
  }
};

TEST_F(InsecureTest, EveryServerRefusesAnOpenAddressWithoutTls) {
  for (const char* open : {"0.0.0.0:0", "[::]:0"}) {
    ExpectRefusal(LedgerServer::Start(Ledger(open, false), RealClock::Get()).status(),
                  "--listen=");
    ExpectRefusal(SidecarServer::Start(Sidecar(open, false), RealClock::Get()).status(),
                  "--listen=");
    ExpectRefusal(
        AgentServer::Start(Agent(open, false), RealClock::Get(), RealRandom::Get()).status(),
        "--listen=");
  }
}

TEST_F(InsecureTest, WithInsecureTheyServeAndSaySoInTheirMetrics) {
  auto ledger = LedgerServer::Start(Ledger("0.0.0.0:0", true), RealClock::Get());
  ASSERT_TRUE(ledger.ok()) << ledger.status();
  auto sidecar = SidecarServer::Start(Sidecar("0.0.0.0:0", true), RealClock::Get());
  ASSERT_TRUE(sidecar.ok()) << sidecar.status();
  auto agent = AgentServer::Start(Agent("0.0.0.0:0", true), RealClock::Get(), RealRandom::Get());
  ASSERT_TRUE(agent.ok()) << agent.status();
  EXPECT_EQ(InsecureGauge((*ledger)->metrics_port()), "1");
  EXPECT_EQ(InsecureGauge((*sidecar)->metrics_port()), "1");
  EXPECT_EQ(InsecureGauge((*agent)->metrics_port()), "1");
}

TEST_F(InsecureTest, OnLoopbackTheyNeedNeitherAndTheGaugeIsZero) {
  auto ledger = LedgerServer::Start(Ledger("127.0.0.1:0", false), RealClock::Get());
  ASSERT_TRUE(ledger.ok()) << ledger.status();
  auto sidecar = SidecarServer::Start(Sidecar("127.0.0.1:0", false), RealClock::Get());
  ASSERT_TRUE(sidecar.ok()) << sidecar.status();
  auto agent = AgentServer::Start(Agent("unix:" + testing::SocketDir() + "/agent.sock", false),
                                  RealClock::Get(), RealRandom::Get());
  ASSERT_TRUE(agent.ok()) << agent.status();
  EXPECT_EQ(InsecureGauge((*ledger)->metrics_port()), "0");
  EXPECT_EQ(InsecureGauge((*sidecar)->metrics_port()), "0");
  EXPECT_EQ(InsecureGauge((*agent)->metrics_port()), "0");
}

// The binaries: --insecure is a warning in the log at every start; a local listener
// without TLS is one line saying identities come from headers.
TEST(InsecureBinaryTest, TheLogSaysHowIdentitiesAreTakenAtEveryStart) {
  const std::string dir = testing::FreshDir("insecure-binary");
  for (int start = 0; start < 2; ++start) {
    auto sidecar = Process::Start("dedupe_sidecar/dedupe_sidecar",
                                  {"--listen=0.0.0.0:0", "--insecure", "--data_dir=" + dir + "/open",
                                   "--upstream=127.0.0.1:1"},
                                  dir + "/open.log");
    ASSERT_TRUE(sidecar.ok()) << sidecar.status();
    EXPECT_EQ((*sidecar)->Signal(SIGTERM, true), 0);
  }
  const std::string open = ReadFile(dir + "/open.log");
  size_t first = open.find("INSECURE (--insecure)");
  ASSERT_NE(first, std::string::npos) << open;
  EXPECT_NE(open.find("INSECURE (--insecure)", first + 1), std::string::npos)
      << "the second start said nothing";
  EXPECT_TRUE(absl::StrContains(open, "\"level\":\"warn\"")) << open;

  auto local = Process::Start("dedupe_sidecar/dedupe_sidecar",
                              {"--listen=127.0.0.1:0", "--data_dir=" + dir + "/local",
                               "--upstream=127.0.0.1:1"},
                              dir + "/local.log");
  ASSERT_TRUE(local.ok()) << local.status();
  EXPECT_EQ((*local)->Signal(SIGTERM, true), 0);
  const std::string said = ReadFile(dir + "/local.log");
  EXPECT_TRUE(absl::StrContains(said, "identities come from request headers")) << said;
  EXPECT_FALSE(absl::StrContains(said, "INSECURE")) << said;
}

}  // namespace
}  // namespace eonce
