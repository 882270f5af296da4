#include "dedupe_sidecar/authz/policy.h"

#include <fstream>
#include <thread>

#include "gtest/gtest.h"
#include "tests/util/temp_dir.h"

namespace eonce {
namespace {

constexpr char kTransfer[] = "/eonce.ledger.v1.Ledger/Transfer";

TEST(PolicyTest, AllowRulesMatchTenantActorAndMethod) {
  auto policy = Policy::Parse(
      "# the ledger team\n"
      "allow acme alice /eonce.ledger.v1.Ledger/Transfer\n"
      "allow acme *     /eonce.ledger.v1.Ledger/GetAccount   # reads for everyone\n"
      "allow globex ops *\n");
  ASSERT_TRUE(policy.ok()) << policy.status();
  EXPECT_TRUE(policy->Check("acme", "alice", "alice", kTransfer, 1).allowed);
  EXPECT_FALSE(policy->Check("acme", "bob", "bob", kTransfer, 1).allowed);
  EXPECT_EQ(policy->Check("acme", "bob", "bob", kTransfer, 1).reason, "POLICY_DENIED");
  EXPECT_TRUE(policy->Check("acme", "bob", "bob", "/eonce.ledger.v1.Ledger/GetAccount", 1).allowed);
  EXPECT_TRUE(policy->Check("globex", "ops", "ops", "/x.Y/Z", 1).allowed);
  EXPECT_FALSE(policy->Check("initech", "alice", "alice", kTransfer, 1).allowed);
}

TEST(PolicyTest, RevocationsWinOverAllows) {
  auto policy = Policy::Parse(
      "allow acme * *\n"
      "revoke acme mallory\n"
      "revoke acme alice below_epoch=5\n");
  ASSERT_TRUE(policy.ok());
  EXPECT_EQ(policy->Check("acme", "mallory", "mallory", kTransfer, 99).reason, "CREDENTIAL_REVOKED");
  EXPECT_EQ(policy->Check("acme", "alice", "alice", kTransfer, 4).reason, "CREDENTIAL_REVOKED");
  EXPECT_TRUE(policy->Check("acme", "alice", "alice", kTransfer, 5).allowed);
  EXPECT_TRUE(policy->Check("acme", "bob", "bob", kTransfer, 1).allowed);
}

TEST(PolicyTest, AWorkloadActsOnlyForTheActorsItIsNamedFor) {
  auto policy = Policy::Parse(
      "act acme payroll alice\n"
      "act acme relay *\n"
      "allow acme * *\n"
      "allow globex * *\n"
      "revoke acme stolen\n");
  ASSERT_TRUE(policy.ok()) << policy.status();
  EXPECT_TRUE(policy->Check("acme", "payroll", "alice", kTransfer, 1).allowed);
  EXPECT_EQ(policy->Check("acme", "payroll", "bob", kTransfer, 1).reason, "ACTOR_NOT_PERMITTED");
  EXPECT_EQ(policy->Check("acme", "billing", "alice", kTransfer, 1).reason,
            "ACTOR_NOT_PERMITTED");
  EXPECT_TRUE(policy->Check("acme", "relay", "bob", kTransfer, 1).allowed);
  // A workload that states no actor acts as itself and needs no act rule.
  EXPECT_TRUE(policy->Check("acme", "billing", EffectiveActor("billing", ""), kTransfer, 1)
                  .allowed);
  // act rules are per tenant.
  EXPECT_EQ(policy->Check("globex", "payroll", "alice", kTransfer, 1).reason,
            "ACTOR_NOT_PERMITTED");
  // A revoked workload is revoked whoever it acts for.
  EXPECT_EQ(policy->Check("acme", "stolen", "stolen", kTransfer, 1).reason, "CREDENTIAL_REVOKED");
  auto stolen_relays = Policy::Parse("act acme * *\nallow acme * *\nrevoke acme stolen\n");
  ASSERT_TRUE(stolen_relays.ok());
  EXPECT_EQ(stolen_relays->Check("acme", "stolen", "alice", kTransfer, 1).reason,
            "CREDENTIAL_REVOKED");
  // Without a policy file every workload may act for every actor (development).
  EXPECT_TRUE(Policy::AllowAll().Check("acme", "billing", "alice", kTransfer, 1).allowed);
}

TEST(PolicyTest, OnlyMethodsListedReadOnlyAreReadOnly) {
  auto policy = Policy::Parse(
      "readonly /eonce.ledger.v1.Ledger/GetAccount\n"
      "mutating /eonce.ledger.v1.Ledger/Transfer\n");
  ASSERT_TRUE(policy.ok());
  EXPECT_TRUE(policy->IsReadOnly("/eonce.ledger.v1.Ledger/GetAccount"));
  EXPECT_FALSE(policy->IsReadOnly(kTransfer));
  EXPECT_FALSE(policy->IsReadOnly("/eonce.ledger.v1.Ledger/OpenAccount"));  // not listed
  EXPECT_FALSE(Policy::AllowAll().IsReadOnly("/eonce.ledger.v1.Ledger/GetAccount"));
}

TEST(PolicyTest, OnlyAPlatformRuleLetsAnOperatorChangeTheSlotMap) {
  auto policy = Policy::Parse("operator acme oncall\nplatform acme sre\n");
  ASSERT_TRUE(policy.ok()) << policy.status();
  EXPECT_TRUE(policy->IsPlatformOperator("acme", "sre"));
  EXPECT_FALSE(policy->IsPlatformOperator("acme", "oncall"));  // a tenant's operator
  EXPECT_FALSE(policy->IsPlatformOperator("globex", "sre"));   // another tenant's sre
  EXPECT_FALSE(policy->IsPlatformOperator("acme", ""));
  // No wildcard: the map moves every tenant's commands.
  EXPECT_FALSE(Policy::Parse("platform acme *\n").ok());
  EXPECT_FALSE(Policy::Parse("platform * sre\n").ok());
}

TEST(PolicyTest, MalformedLinesAreNamed) {
  const char* bad[] = {"allow acme alice", "allow * a /b.C/D", "revoke acme",
                       "revoke acme a below_epoch=x", "mutating Transfer", "readonly Get",
                       "permit a b c", "act acme w", "act * w a"};
  for (const char* text : bad) {
    auto policy = Policy::Parse(std::string("# ok\n") + text + "\n");
    EXPECT_EQ(policy.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_NE(policy.status().message().find("line 2"), std::string::npos) << text;
  }
}

TEST(PolicyStoreTest, NoFileAllowsEverything) {
  auto store = PolicyStore::Open("");
  ASSERT_TRUE(store.ok());
  EXPECT_TRUE((*store)->Check("acme", "anyone", "anyone", kTransfer, 0).allowed);
}

TEST(PolicyStoreTest, ReloadsWhenTheFileChangesAndKeepsTheOldPolicyOnABadFile) {
  std::string path = testing::FreshDir("policy") + "/policy.txt";
  std::ofstream(path) << "allow acme alice *\n";
  auto opened = PolicyStore::Open(path);
  ASSERT_TRUE(opened.ok()) << opened.status();
  PolicyStore& store = **opened;
  EXPECT_TRUE(store.Check("acme", "alice", "alice", kTransfer, 1).allowed);

  std::ofstream(path) << "allow acme alice *\nrevoke acme alice\n";
  ASSERT_TRUE(store.MaybeReload().ok());
  EXPECT_FALSE(store.Check("acme", "alice", "alice", kTransfer, 1).allowed);

  std::ofstream(path) << "allow acme\n";  // broken
  EXPECT_FALSE(store.MaybeReload().ok());
  EXPECT_EQ(store.Check("acme", "alice", "alice", kTransfer, 1).reason, "CREDENTIAL_REVOKED");
  EXPECT_TRUE(store.MaybeReload().ok());  // the same bad file is reported once

  EXPECT_FALSE(PolicyStore::Open("/nonexistent/policy").ok());
  std::ofstream(path) << "nonsense\n";
  EXPECT_FALSE(PolicyStore::Open(path).ok());
}

}  // namespace
}  // namespace eonce
