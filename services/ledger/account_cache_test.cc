// AccountCache alone: what it keeps, what it refuses to keep, and its bound. The ledger's
// use of it, on a real store, is in ledger_test and ledger_shards_test.
#include "services/ledger/account_cache.h"

#include "gtest/gtest.h"

namespace eonce {
namespace {

ledger::v1::Account Account(const std::string& id, int64_t balance) {
  ledger::v1::Account account;
  account.set_id(id);
  account.set_balance(balance);
  return account;
}

int64_t BalanceIn(AccountCache& cache, const std::string& id) {
  std::optional<ledger::v1::Account> kept = cache.Get(AccountKey("", id));
  return kept.has_value() ? kept->balance() : -1;
}

TEST(AccountCacheTest, KeepsWhatAReadFoundAndWhatAWriteWrote) {
  AccountCache cache;
  EXPECT_EQ(BalanceIn(cache, "alice"), -1);
  cache.Fill(Account("alice", 100), cache.Generation());
  EXPECT_EQ(BalanceIn(cache, "alice"), 100);
  // A write forgets as it batches, and keeps once written.
  cache.Forget(AccountKey("", "alice"));
  std::function<void()> written = cache.KeepWhenWritten({Account("alice", 70)});
  EXPECT_EQ(BalanceIn(cache, "alice"), -1);
  written();
  EXPECT_EQ(BalanceIn(cache, "alice"), 70);
  EXPECT_EQ(cache.hits(), 2);
  EXPECT_EQ(cache.misses(), 2);
}

TEST(AccountCacheTest, AFillDoesNotReplaceWhatAWriteKept) {
  AccountCache cache;
  const uint64_t generation = cache.Generation();
  cache.KeepWhenWritten({Account("alice", 70)})();
  cache.Fill(Account("alice", 100), generation);
  EXPECT_EQ(BalanceIn(cache, "alice"), 70);
}

// The race a lockless write (a slot imported or dropped) makes: a read of the store
// before it, or a batch written before it, must not be kept after it.
TEST(AccountCacheTest, NothingBegunBeforeAClearIsKeptAfterIt) {
  AccountCache cache;
  const uint64_t read_began = cache.Generation();
  std::function<void()> written = cache.KeepWhenWritten({Account("bob", 50)});
  cache.Fill(Account("carol", 10), cache.Generation());
  cache.Clear();
  EXPECT_EQ(BalanceIn(cache, "carol"), -1);
  cache.Fill(Account("alice", 100), read_began);
  written();
  EXPECT_EQ(BalanceIn(cache, "alice"), -1);
  EXPECT_EQ(BalanceIn(cache, "bob"), -1);
  EXPECT_EQ(cache.size(), 0u);
  // Begun after it: kept.
  cache.Fill(Account("alice", 90), cache.Generation());
  EXPECT_EQ(BalanceIn(cache, "alice"), 90);
}

TEST(AccountCacheTest, AtItsBoundItStartsOverAndZeroKeepsNothing) {
  AccountCache cache(3);
  for (int i = 0; i < 3; ++i) cache.Fill(Account("a" + std::to_string(i), i), 0);
  EXPECT_EQ(cache.size(), 3u);
  cache.Fill(Account("a3", 3), 0);
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(BalanceIn(cache, "a3"), 3);
  EXPECT_EQ(BalanceIn(cache, "a0"), -1);

  AccountCache none(0);
  none.Fill(Account("alice", 100), none.Generation());
  none.KeepWhenWritten({Account("bob", 1)})();
  EXPECT_EQ(none.size(), 0u);
  EXPECT_EQ(BalanceIn(none, "alice"), -1);
}

}  // namespace
}  // namespace eonce
