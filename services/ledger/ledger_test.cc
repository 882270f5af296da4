#include "services/ledger/ledger.h"

#include "common/rpc/grpc_status.h"
#include "gtest/gtest.h"
#include "tests/util/temp_dir.h"

namespace eonce {
namespace {

class LedgerTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    auto families = LedgerCore::ColumnFamilies();
    for (auto& f : Inbox::ColumnFamilies(clock_)) families.push_back(f);
    auto store = RocksStore::Open(testing::FreshDir("ledger"), families, StoreOptions());
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    inbox_ = std::make_unique<Inbox>(*store_, clock_, /*legacy_mode=*/GetParam());
    core_ = std::make_unique<LedgerCore>(*store_, *inbox_);
    Open("alice", 100);
    Open("bob", 50);
  }

  // A new LedgerCore on the same store and inbox, as after a restart (with the key
  // migration every start runs first).
  void Restart() {
    core_.reset();
    core_ = std::make_unique<LedgerCore>(*store_, *inbox_);
    ASSERT_TRUE(core_->MigrateAccountKeys().ok());
  }

  CallIdentity Id(const std::string& command_id, const std::string& tenant = "acme") {
    CallIdentity id;
    id.command_id = command_id;
    id.tenant = tenant;
    return id;
  }

  void Open(const std::string& account, int64_t balance) {
    ledger::v1::OpenAccountRequest request;
    request.set_id(account);
    request.set_initial_balance(balance);
    auto result = core_->OpenAccount(Id("open-" + account), request);
    ASSERT_TRUE(result.ok());
    ASSERT_EQ(result->code(), 0) << result->message();
  }

  v1::CallResult Transfer(const std::string& command_id, const std::string& from,
                          const std::string& to, int64_t amount) {
    ledger::v1::TransferRequest request;
    request.set_from(from);
    request.set_to(to);
    request.set_amount(amount);
    auto result = core_->Transfer(Id(command_id), request);
    EXPECT_TRUE(result.ok()) << result.status();
    return result.value_or(v1::CallResult());
  }

  int64_t Balance(const std::string& id) { return core_->GetAccount("acme", id)->balance(); }

  void ExpectConserved() {
    auto total = core_->GetTotal();
    ASSERT_TRUE(total.ok());
    EXPECT_EQ(total->total_balance(), total->total_minted());
  }

  static std::string ReasonOf(const v1::CallResult& result) {
    std::optional<v1::Rejection> rejection = eonce::RejectionOf(result.error_details());
    EXPECT_TRUE(rejection.has_value());
    return rejection.has_value() ? rejection->reason() : "";
  }

  ManualClock clock_;
  std::unique_ptr<RocksStore> store_;
  std::unique_ptr<Inbox> inbox_;
  std::unique_ptr<LedgerCore> core_;
};

TEST_P(LedgerTest, TransferMovesMoneyAndConservesTheTotal) {
  v1::CallResult result = Transfer("t1", "alice", "bob", 30);
  ASSERT_EQ(result.code(), 0);
  ledger::v1::TransferResponse response;
  ASSERT_TRUE(response.ParseFromString(result.response()));
  EXPECT_EQ(response.from_balance(), 70);
  EXPECT_EQ(response.to_balance(), 80);
  EXPECT_EQ(Balance("alice"), 70);
  EXPECT_EQ(Balance("bob"), 80);
  auto total = core_->GetTotal();
  EXPECT_EQ(total->total_minted(), 150);
  EXPECT_EQ(total->accounts(), 2);
  ExpectConserved();
}

// Accounts belong to the tenant that opened them: another tenant can neither move their
// money (in or out) nor read them, and is told only what it would be told of an unknown
// account.
TEST_P(LedgerTest, ATenantNeitherMovesNorSeesAnotherTenantsMoney) {
  ledger::v1::TransferRequest steal;
  steal.set_from("alice");  // acme's
  steal.set_to("bob");
  steal.set_amount(10);
  auto stolen = core_->Transfer(Id("globex-steal", "globex"), steal);
  ASSERT_TRUE(stolen.ok());
  EXPECT_EQ(stolen->code(), static_cast<int>(absl::StatusCode::kNotFound));
  EXPECT_EQ(ReasonOf(*stolen), "NO_SUCH_ACCOUNT");
  ledger::v1::OpenAccountRequest open;
  open.set_id("mallory");
  open.set_initial_balance(5);
  ASSERT_EQ(core_->OpenAccount(Id("open-mallory", "globex"), open)->code(), 0);
  ledger::v1::TransferRequest into;  // globex's own account to acme's
  into.set_from("mallory");
  into.set_to("alice");
  into.set_amount(1);
  EXPECT_EQ(ReasonOf(*core_->Transfer(Id("globex-into", "globex"), into)), "NO_SUCH_ACCOUNT");
  EXPECT_EQ(core_->GetAccount("globex", "alice").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Balance("alice"), 100);
  EXPECT_EQ(core_->GetAccount("globex", "mallory")->balance(), 5);
  EXPECT_EQ(core_->GetAccount("globex", "mallory")->tenant(), "globex");
  // Its own owner moves it as before.
  EXPECT_EQ(Transfer("acme-pay", "alice", "bob", 10).code(), 0);
  EXPECT_EQ(Balance("alice"), 90);
  ExpectConserved();
}

// An account written before the ledger kept tenants is reachable to every tenant until
// the ledger gives it the tenant of its OpenAccount effect, which it does at start.
TEST_P(LedgerTest, AnAccountOpenedBeforeTenantsWereKeptGetsItsTenantFromTheEffectLedger) {
  // As an old ledger kept it: under its id alone, with no tenant.
  ledger::v1::Account old = *core_->GetAccount("acme", "alice");
  ASSERT_TRUE(store_->db()
                  ->Delete(rocksdb::WriteOptions(), store_->cf("accounts"),
                           AccountKey("acme", "alice"))
                  .ok());
  old.clear_tenant();
  ASSERT_TRUE(store_->db()
                  ->Put(rocksdb::WriteOptions(), store_->cf("accounts"), "alice",
                        old.SerializeAsString())
                  .ok());
  Restart();  // the old data is what the ledger finds at start
  EXPECT_TRUE(core_->GetAccount("globex", "alice").ok());  // what the old data allowed
  // A transfer keeps the account without a tenant in memory; adopting it must not leave
  // that copy there.
  ASSERT_EQ(Transfer("t-old", "alice", "bob", 10).code(), 0);
  absl::StatusOr<int64_t> adopted = core_->AdoptTenantsFromEffects();
  ASSERT_TRUE(adopted.ok()) << adopted.status();
  EXPECT_EQ(*adopted, 1);
  EXPECT_EQ(core_->GetAccount("globex", "alice").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(core_->GetAccount("acme", "alice")->tenant(), "acme");
  EXPECT_EQ(core_->GetAccount("acme", "alice")->balance(), 90);
  ledger::v1::TransferRequest steal;
  steal.set_from("alice");
  steal.set_to("bob");
  steal.set_amount(1);
  auto stolen = core_->Transfer(Id("t-steal", "globex"), steal);
  ASSERT_TRUE(stolen.ok());
  EXPECT_EQ(ReasonOf(*stolen), "NO_SUCH_ACCOUNT");
  EXPECT_EQ(*core_->AdoptTenantsFromEffects(), 0);
}

// Two tenants may each open an account of the same id: accounts are keyed by tenant and
// id, so neither is refused as existing, and each moves only its own money.
TEST_P(LedgerTest, TwoTenantsEachHaveTheirOwnAccountOfOneId) {
  ledger::v1::OpenAccountRequest open;
  open.set_id("alice");
  open.set_initial_balance(7);
  auto opened = core_->OpenAccount(Id("globex-open-alice", "globex"), open);
  ASSERT_TRUE(opened.ok());
  ASSERT_EQ(opened->code(), 0) << opened->message();
  open.set_id("bob");
  ASSERT_EQ(core_->OpenAccount(Id("globex-open-bob", "globex"), open)->code(), 0);
  ledger::v1::TransferRequest pay;
  pay.set_from("alice");
  pay.set_to("bob");
  pay.set_amount(5);
  ASSERT_EQ(core_->Transfer(Id("globex-pay", "globex"), pay)->code(), 0);
  EXPECT_EQ(core_->GetAccount("globex", "alice")->balance(), 2);
  EXPECT_EQ(core_->GetAccount("globex", "bob")->balance(), 12);
  EXPECT_EQ(Balance("alice"), 100);  // acme's
  EXPECT_EQ(Balance("bob"), 50);
  EXPECT_EQ(core_->GetTotal()->accounts(), 4);
  ExpectConserved();
}

// Accounts an older ledger keyed by id alone are found under the new keys once the start
// pass moved them, each once, counted once.
TEST_P(LedgerTest, AccountsKeyedByIdAloneAreMovedToTenantKeysAtStart) {
  for (const char* id : {"alice", "bob"}) {
    ledger::v1::Account account = *core_->GetAccount("acme", id);
    ASSERT_TRUE(store_->db()
                    ->Delete(rocksdb::WriteOptions(), store_->cf("accounts"),
                             AccountKey("acme", id))
                    .ok());
    ASSERT_TRUE(store_->db()
                    ->Put(rocksdb::WriteOptions(), store_->cf("accounts"), id,
                          account.SerializeAsString())
                    .ok());
  }
  core_ = std::make_unique<LedgerCore>(*store_, *inbox_);
  absl::StatusOr<int64_t> moved = core_->MigrateAccountKeys();
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_EQ(*moved, 2);
  EXPECT_EQ(*core_->MigrateAccountKeys(), 0);
  EXPECT_EQ(Balance("alice"), 100);
  EXPECT_EQ(core_->GetAccount("acme", "bob")->tenant(), "acme");
  std::string value;
  EXPECT_TRUE(store_->Get("accounts", "alice", &value).IsNotFound());
  EXPECT_EQ(core_->GetTotal()->accounts(), 2);
  ASSERT_EQ(Transfer("after", "alice", "bob", 10).code(), 0);
  ExpectConserved();
}

// The accounts kept in memory (AccountCache) are the store's: after transfers, refusals
// and repeats, each reads as a ledger with no memory reads it from the same store.
TEST_P(LedgerTest, AccountsReadFromMemoryAreTheStoresAfterEveryKindOfCall) {
  Open("carol", 5);
  for (int i = 0; i < 40; ++i) {
    const char* from = i % 3 == 0 ? "alice" : (i % 3 == 1 ? "bob" : "carol");
    const char* to = i % 3 == 0 ? "carol" : (i % 3 == 1 ? "alice" : "bob");
    Transfer("m" + std::to_string(i), from, to, 1 + (i * 7) % 40);  // some are refused
    Transfer("m" + std::to_string(i / 2), from, to, 1 + (i * 7) % 40);  // and some repeats
  }
  LedgerOptions no_memory;
  no_memory.account_cache_entries = 0;
  LedgerCore plain(*store_, *inbox_, no_memory);
  for (const char* id : {"alice", "bob", "carol"}) {
    auto kept = core_->GetAccount("acme", id);
    auto stored = plain.GetAccount("acme", id);
    ASSERT_TRUE(kept.ok() && stored.ok());
    EXPECT_EQ(kept->SerializeAsString(), stored->SerializeAsString()) << id;
  }
  EXPECT_GT(core_->account_cache().hits(), 40);
  EXPECT_EQ(plain.account_cache().hits(), 0);
  ExpectConserved();
}

TEST_P(LedgerTest, RejectionsAreDistinctAndMachineReadable) {
  v1::CallResult poor = Transfer("t1", "bob", "alice", 51);
  EXPECT_EQ(poor.code(), static_cast<int>(absl::StatusCode::kFailedPrecondition));
  EXPECT_EQ(ReasonOf(poor), "INSUFFICIENT_FUNDS");
  v1::CallResult nobody = Transfer("t2", "alice", "carol", 1);
  EXPECT_EQ(nobody.code(), static_cast<int>(absl::StatusCode::kNotFound));
  EXPECT_EQ(ReasonOf(nobody), "NO_SUCH_ACCOUNT");
  v1::CallResult zero = Transfer("t3", "alice", "bob", 0);
  EXPECT_EQ(zero.code(), static_cast<int>(absl::StatusCode::kInvalidArgument));
  v1::CallResult self = Transfer("t4", "alice", "alice", 5);
  EXPECT_EQ(ReasonOf(self), "INVALID_REQUEST");
  ledger::v1::OpenAccountRequest again;
  again.set_id("alice");
  auto exists = core_->OpenAccount(Id("open-again"), again);
  EXPECT_EQ(ReasonOf(*exists), "ACCOUNT_EXISTS");
  EXPECT_EQ(Balance("alice"), 100);
  EXPECT_EQ(Balance("bob"), 50);
  ExpectConserved();
}

TEST_P(LedgerTest, RepeatedCommandMovesMoneyOnceInInboxModeAndTwiceInLegacyMode) {
  v1::CallResult first = Transfer("dup", "alice", "bob", 10);
  v1::CallResult second = Transfer("dup", "alice", "bob", 10);
  ASSERT_EQ(first.code(), 0);
  ASSERT_EQ(second.code(), 0);
  if (GetParam()) {  // legacy: the duplicate visibly moves money twice
    EXPECT_EQ(Balance("alice"), 80);
    EXPECT_NE(first.response(), second.response());
  } else {
    EXPECT_EQ(Balance("alice"), 90);
    EXPECT_EQ(first.response(), second.response());
  }
  ExpectConserved();
}

TEST_P(LedgerTest, ARejectionIsReplayedEvenAfterTheStateChanges) {
  if (GetParam()) GTEST_SKIP() << "legacy mode keeps no inbox to replay from";
  v1::CallResult poor = Transfer("big", "bob", "alice", 60);
  EXPECT_EQ(ReasonOf(poor), "INSUFFICIENT_FUNDS");
  ASSERT_EQ(Transfer("topup", "alice", "bob", 20).code(), 0);  // bob now holds 70
  v1::CallResult again = Transfer("big", "bob", "alice", 60);
  EXPECT_EQ(again.SerializeAsString(), poor.SerializeAsString());
  EXPECT_EQ(Balance("bob"), 70);
}

INSTANTIATE_TEST_SUITE_P(Modes, LedgerTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Legacy" : "Inbox"; });

}  // namespace
}  // namespace eonce
