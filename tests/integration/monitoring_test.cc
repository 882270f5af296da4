// The alert rules and the dashboard in deploy/monitoring against the real servers:
// promtool checks the rules and runs their unit tests (each alert firing and staying
// quiet), a rule with a broken threshold fails those tests (the negative control), and
// every metric the rules and the dashboard name is exported by a running sidecar, agent
// or ledger.
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "common/base/clock.h"
#include "common/base/random.h"
#include "dedupe_sidecar/doors/sidecar_service.h"
#include "common/coord/memory_map_store.h"
#include "gtest/gtest.h"
#include "outbox_agent/doors/agent_server.h"
#include "services/ledger/ledger_service.h"
#include "tests/util/http_get.h"
#include "tests/util/temp_dir.h"

namespace eonce {
namespace {

constexpr char kAlerts[] = "deploy/monitoring/alerts.yaml";
constexpr char kAlertTests[] = "deploy/monitoring/alerts_test.yaml";
constexpr char kDashboard[] = "deploy/monitoring/dashboard.json";

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

bool HavePromtool() { return std::system("command -v promtool >/dev/null 2>&1") == 0; }

int Promtool(const std::string& args) {
  return std::system(("promtool " + args + " >/dev/null 2>&1").c_str());
}

// The metric names of a Prometheus text exposition.
std::set<std::string> Exported(const std::string& text) {
  std::set<std::string> names;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] == '#') continue;
    names.insert(line.substr(0, line.find_first_of("{ ")));
  }
  return names;
}

// The eonce metrics `text` names that are not in `exported` (a histogram's _bucket, _sum
// and _count series count as exported with it).
std::set<std::string> Missing(const std::string& text, const std::set<std::string>& exported,
                              int* named) {
  std::set<std::string> missing;
  std::regex metric("eonce_[a-z_]+");
  *named = 0;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), metric);
       it != std::sregex_iterator(); ++it) {
    std::string name = it->str();
    ++*named;
    if (exported.count(name) == 0) missing.insert(name);
  }
  return missing;
}

class MonitoringTest : public ::testing::Test {
 protected:
  void SetUp() override {
    LedgerServerOptions ledger_options;
    ledger_options.data_dir = testing::FreshDir("ledger");
    ledger_options.metrics_address = "127.0.0.1:0";
    ledger_options.metrics_name = "ledger";  // what ledger_service names itself
    auto ledger = LedgerServer::Start(ledger_options, RealClock::Get());
    ASSERT_TRUE(ledger.ok()) << ledger.status();
    ledger_ = std::move(*ledger);

    SidecarServerOptions sidecar_options;
    sidecar_options.data_dir = testing::FreshDir("sidecar");
    sidecar_options.upstream_address = "127.0.0.1:" + std::to_string(ledger_->port());
    sidecar_options.metrics_address = "127.0.0.1:0";
    // Sharded (one shard), so that the slot gate's metrics are exported too.
    v1::ShardInfo only;
    only.set_id("s0");
    only.set_address("127.0.0.1:1");
    sidecar_options.shard_id = "s0";
    ASSERT_TRUE(store_.CompareAndSwap(0, *SlotMap::Even({only})).ok());
    lease_ = store_.NewLease();
    sidecar_options.map_store = &store_;
    sidecar_options.shard_lease = lease_.get();
    auto sidecar = SidecarServer::Start(sidecar_options, RealClock::Get());
    ASSERT_TRUE(sidecar.ok()) << sidecar.status();
    sidecar_ = std::move(*sidecar);

    AgentServerOptions agent_options;
    agent_options.data_dir = testing::FreshDir("agent");
    agent_options.tenant = "acme";
    agent_options.default_sidecar = "127.0.0.1:" + std::to_string(sidecar_->port());
    agent_options.metrics_address = "127.0.0.1:0";
    auto agent = AgentServer::Start(agent_options, RealClock::Get(), RealRandom::Get());
    ASSERT_TRUE(agent.ok()) << agent.status();
    agent_ = std::move(*agent);

    for (int port : {ledger_->metrics_port(), sidecar_->metrics_port(), agent_->metrics_port()}) {
      std::set<std::string> names = Exported(testing::HttpGet(port, "/metrics"));
      exported_.insert(names.begin(), names.end());
    }
  }

  MemoryMapStore store_{RealClock::Get()};
  std::unique_ptr<ShardLease> lease_;  // outlives the sidecar
  std::unique_ptr<LedgerServer> ledger_;
  std::unique_ptr<SidecarServer> sidecar_;
  std::unique_ptr<AgentServer> agent_;
  std::set<std::string> exported_;
};

TEST_F(MonitoringTest, EveryMetricTheRulesAndTheDashboardNameIsExported) {
  for (const char* file : {kAlerts, kDashboard}) {
    int named = 0;
    std::set<std::string> missing = Missing(Read(file), exported_, &named);
    EXPECT_GE(named, 7) << file;
    EXPECT_TRUE(missing.empty()) << file << " names metrics nothing exports: "
                                 << *missing.begin();
  }
  // The check can fail: a name the binaries do not export is reported.
  int named = 0;
  EXPECT_EQ(Missing("rate(eonce_sidecar_made_up_total[5m])", exported_, &named),
            (std::set<std::string>{"eonce_sidecar_made_up_total"}));
}

// GitHub's anchor for a heading: lower case, spaces to dashes, punctuation dropped.
std::string Anchor(const std::string& heading) {
  std::string anchor;
  for (char c : heading) {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      anchor.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
    } else if (c == ' ' || c == '-') {
      anchor.push_back('-');
    }
  }
  return anchor;
}

TEST(RunbookTest, EveryAlertNamesARunbookTheGuideHas) {
  std::set<std::string> anchors;
  std::istringstream guide(Read("docs/operations.md"));
  std::string line;
  while (std::getline(guide, line)) {
    if (line.rfind("## ", 0) == 0) anchors.insert(Anchor(line.substr(3)));
    if (line.rfind("### ", 0) == 0) anchors.insert(Anchor(line.substr(4)));
  }
  std::string rules = Read(kAlerts);
  std::regex runbook("runbook: docs/operations.md#([a-z0-9-]+)");
  int alerts = 0;
  for (auto it = std::sregex_iterator(rules.begin(), rules.end(), runbook);
       it != std::sregex_iterator(); ++it) {
    ++alerts;
    EXPECT_EQ(anchors.count((*it)[1].str()), 1u) << "no runbook " << (*it)[1].str();
  }
  EXPECT_EQ(alerts, 12);
  EXPECT_EQ(anchors.count("no-such-runbook"), 0u);
}

TEST_F(MonitoringTest, TheRulesLoadAndTheirUnitTestsPass) {
  if (!HavePromtool()) GTEST_SKIP() << "promtool is not installed (tools/setup.sh installs it)";
  EXPECT_EQ(Promtool(std::string("check rules ") + kAlerts), 0);
  EXPECT_EQ(Promtool(std::string("test rules ") + kAlertTests), 0);
  // The negative control: a parked-outcome alert that waits for six parked records no
  // longer fires where its unit test says it must.
  std::string dir = testing::FreshDir("broken-rules");
  std::string rules = Read(kAlerts);
  const std::string threshold = "eonce_sidecar_parked_records > 0";
  ASSERT_NE(rules.find(threshold), std::string::npos);
  rules.replace(rules.find(threshold), threshold.size(), "eonce_sidecar_parked_records > 5");
  std::ofstream(dir + "/alerts.yaml") << rules;
  std::ofstream(dir + "/alerts_test.yaml") << Read(kAlertTests);
  EXPECT_NE(Promtool("test rules " + dir + "/alerts_test.yaml"), 0);
}

}  // namespace
}  // namespace eonce
