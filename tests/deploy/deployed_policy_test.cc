// The policy deploy/ ships (deploy/base/policy-configmap.yaml), parsed by the sidecar's
// own parser: the producer moves money but cannot mint it through Ledger/Credit, and only
// the ledger pods' relay, acting as itself, may credit an account.
#include <fstream>
#include <sstream>
#include <string>

#include "dedupe_sidecar/authz/policy.h"
#include "gtest/gtest.h"

namespace eonce {
namespace {

constexpr char kCredit[] = "/eonce.ledger.v1.Ledger/Credit";
constexpr char kTransfer[] = "/eonce.ledger.v1.Ledger/Transfer";

// The `policy: |` block of the ConfigMap, unindented.
std::string ShippedPolicy() {
  std::ifstream in("deploy/base/policy-configmap.yaml");
  std::string line, text;
  bool inside = false;
  while (std::getline(in, line)) {
    if (line.find("policy: |") != std::string::npos) {
      inside = true;
      continue;
    }
    if (inside) text += (line.size() >= 4 ? line.substr(4) : "") + "\n";
  }
  return text;
}

// Whether `policy_text` keeps money from being minted: the producer (acting as itself,
// or stating the relay as its actor) is refused Credit, and the relay is allowed it.
bool OnlyTheRelayCredits(const std::string& policy_text) {
  absl::StatusOr<Policy> policy = Policy::Parse(policy_text);
  EXPECT_TRUE(policy.ok()) << policy.status();
  if (!policy.ok()) return false;
  return policy->Check("acme", "producer", "producer", kTransfer, 1).allowed &&
         !policy->Check("acme", "producer", "producer", kCredit, 1).allowed &&
         !policy->Check("acme", "producer", "ledger-relay", kCredit, 1).allowed &&
         policy->Check("acme", "ledger-relay", "ledger-relay", kCredit, 1).allowed;
}

TEST(DeployedPolicyTest, OnlyTheLedgerRelayMayCreditAnAccount) {
  const std::string text = ShippedPolicy();
  ASSERT_NE(text.find("ledger-relay"), std::string::npos) << "policy block not found";
  EXPECT_TRUE(OnlyTheRelayCredits(text));
}

TEST(DeployedPolicyTest, NegativeControlsAWildcardAllowOrActRuleIsCaught) {
  const std::string text = ShippedPolicy();
  EXPECT_FALSE(OnlyTheRelayCredits(text + "allow acme * *\n"));
  EXPECT_FALSE(OnlyTheRelayCredits(text + "act acme producer *\n"));
}

}  // namespace
}  // namespace eonce
