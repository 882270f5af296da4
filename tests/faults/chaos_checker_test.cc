// CheckChaos on hand-made readings: a clean run passes; each way a run can go wrong is
// named by the count that catches it, and a row a move carried to a second shard is not
// mistaken for a second effect.
#include "tests/faults/chaos_checker.h"

#include "gtest/gtest.h"

namespace eonce::testing {
namespace {

constexpr char kOpen[] = "/eonce.ledger.v1.Ledger/OpenAccount";
constexpr char kTransfer[] = "/eonce.ledger.v1.Ledger/Transfer";

v1::Effect Row(const std::string& tenant, const std::string& id, const char* method,
               const std::string& account, int64_t amount, int64_t revision, int64_t at_ms) {
  v1::Effect e;
  e.set_command_id(id);
  e.set_tenant(tenant);
  e.set_entity("account/" + account);
  e.set_method(method);
  e.set_amount(amount);
  e.set_revision(revision);
  e.set_applied_at_ms(at_ms);
  return e;
}

ledger::v1::Account Account(const std::string& tenant, const std::string& id, int64_t balance) {
  ledger::v1::Account a;
  a.set_id(id);
  a.set_tenant(tenant);
  a.set_balance(balance);
  return a;
}

v1::OutboxRecord Acked(const std::string& id) {
  v1::OutboxRecord r;
  r.mutable_command()->set_command_id(id);
  r.set_state(v1::ACKED);
  return r;
}

class ChaosCheckerTest : public ::testing::Test {
 protected:
  // One tenant, two accounts, one transfer between them; two shards, s0 owning the lower
  // half of the slots. Each account sits at its owner, effects at the debited account's.
  void SetUp() override {
    std::vector<v1::ShardInfo> infos(2);
    infos[0].set_id("s0");
    infos[0].set_address("127.0.0.1:1");
    infos[1].set_id("s1");
    infos[1].set_address("127.0.0.1:2");
    map_ = std::make_unique<SlotMap>(*SlotMap::Even(infos));
    load_.tenant = "acme";
    load_.accounts = {"a", "b"};
    load_.acked = {"open-a", "open-b", "t-1"};
    for (const std::string& id : load_.acked) load_.records[id] = Acked(id);
    shards_.resize(2);
    shards_[0].shard = "s0";
    shards_[1].shard = "s1";
    Put("open-a", kOpen, "a", 100, 1, 10);
    Put("open-b", kOpen, "b", 100, 1, 11);
    Put("t-1", kTransfer, "a", 30, 2, 12);  // a and b on one shard or not: the books agree
    Hold("a", 70);
    Hold("b", 130);
    for (ShardReading& s : shards_) {
      for (const auto& [id, account] : s.accounts) {
        s.total.set_total_balance(s.total.total_balance() + account.balance());
      }
    }
    shards_[0].total.set_total_minted(200);
  }
  int Owner(const std::string& account) {
    return map_->OwnerOf(SlotOf("acme", "account", account)) == "s0" ? 0 : 1;
  }
  void Put(const std::string& id, const char* method, const std::string& account,
           int64_t amount, int64_t revision, int64_t at_ms) {
    shards_[Owner(account)].effects.push_back(
        Row("acme", id, method, account, amount, revision, at_ms));
  }
  void Hold(const std::string& account, int64_t balance) {
    shards_[Owner(account)].accounts[account] = Account("acme", account, balance);
  }
  ChaosVerdict Check() { return CheckChaos({load_}, shards_, *map_); }

  std::unique_ptr<SlotMap> map_;
  TenantLoad load_;
  std::vector<ShardReading> shards_;
};

TEST_F(ChaosCheckerTest, ACleanRunPasses) {
  ChaosVerdict v = Check();
  ASSERT_EQ(v.tenants.size(), 1u);
  EXPECT_TRUE(v.ok()) << v.Table();
  EXPECT_EQ(v.tenants[0].judged.applied, 3);
  EXPECT_EQ(v.tenants[0].minted, 200);
  EXPECT_EQ(v.tenants[0].balance, 200);
}

TEST_F(ChaosCheckerTest, AnEffectRowCarriedToAnotherShardIsNotASecondEffect) {
  const int other = 1 - Owner("a");
  shards_[other].effects.push_back(shards_[Owner("a")].effects[0]);
  ChaosVerdict v = Check();
  EXPECT_TRUE(v.ok()) << v.Table();
  EXPECT_EQ(v.tenants[0].carried, 1);
}

TEST_F(ChaosCheckerTest, ASecondApplicationOnAnotherShardIsADuplicate) {
  const int other = 1 - Owner("a");
  shards_[other].effects.push_back(Row("acme", "t-1", kTransfer, "a", 30, 2, 99));
  ChaosVerdict v = Check();
  EXPECT_FALSE(v.ok());
  EXPECT_EQ(v.tenants[0].judged.duplicate_effects, 1);
  EXPECT_NE(v.Table().find("WRONG"), std::string::npos);
}

TEST_F(ChaosCheckerTest, AnAcknowledgedCommandWithoutAnEffectIsLost) {
  load_.acked.insert("t-2");
  load_.records["t-2"] = Acked("t-2");
  ChaosVerdict v = Check();
  EXPECT_FALSE(v.ok());
  EXPECT_EQ(v.tenants[0].judged.lost, 1);
}

TEST_F(ChaosCheckerTest, MoneyThatAppearedBreaksTheTenantsConservation) {
  shards_[Owner("b")].accounts["b"].set_balance(131);
  ChaosVerdict v = Check();
  EXPECT_FALSE(v.ok());
  EXPECT_FALSE(v.tenants[0].conserved());
}

TEST_F(ChaosCheckerTest, AnAccountLeftAtItsOldShardIsMisplaced) {
  shards_[1 - Owner("a")].accounts["a"] = Account("acme", "a", 70);
  ChaosVerdict v = Check();
  EXPECT_FALSE(v.ok());
  EXPECT_EQ(v.tenants[0].misplaced, 1);
}

TEST_F(ChaosCheckerTest, AnotherTenantsEffectsAreNotThisTenants) {
  TenantLoad globex;
  globex.tenant = "globex";
  ChaosVerdict v = CheckChaos({load_, globex}, shards_, *map_);
  ASSERT_EQ(v.tenants.size(), 2u);
  EXPECT_EQ(v.tenants[1].judged.effects, 0);
  EXPECT_EQ(v.tenants[1].minted, 0);
  EXPECT_TRUE(v.ok()) << v.Table();
}

TEST_F(ChaosCheckerTest, ACreditSentAndNeverReceivedFailsTheCrossShardBooks) {
  shards_[0].total.set_credits_sent(5);
  EXPECT_FALSE(Check().ok());
}

TEST_F(ChaosCheckerTest, EffectsOfAShardsSlotsInAWindowAreCountedOnceWhereverTheyLie) {
  const std::string owner_of_a = Owner("a") == 0 ? "s0" : "s1";
  // open-a at 10 and t-1 at 12 are a's; open-b at 11 is b's.
  EXPECT_EQ(EffectsOfSlotsBetween(shards_, *map_, owner_of_a, 10, 13),
            Owner("a") == Owner("b") ? 3 : 2);
  EXPECT_EQ(EffectsOfSlotsBetween(shards_, *map_, owner_of_a, 12, 13), 1);
  EXPECT_EQ(EffectsOfSlotsBetween(shards_, *map_, owner_of_a, 13, 100), 0);
  // The same row copied to the other shard is one effect; another shard's slots are not
  // counted for this one.
  shards_[1 - Owner("a")].effects.push_back(shards_[Owner("a")].effects.back());
  EXPECT_EQ(EffectsOfSlotsBetween(shards_, *map_, owner_of_a, 12, 13), 1);
  EXPECT_EQ(EffectsOfSlotsBetween(shards_, *map_, owner_of_a == "s0" ? "s1" : "s0", 12, 13),
            0);
}

}  // namespace
}  // namespace eonce::testing
