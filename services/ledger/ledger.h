// LedgerCore: accounts with balances and transfers between them, behind the inbox.
//
// The invariant: the sum of all balances equals the total minted by OpenAccount.
// Transfers lock both accounts (striped), so concurrent transfers on other accounts run
// in parallel. Mutations return a CallResult: OK with the serialized response, or a
// terminal rejection (see ledger.proto); a non-OK StatusOr is an operating error.
// Thread-safe. The store and inbox must outlive it.
#ifndef EONCE_SERVICES_LEDGER_LEDGER_H_
#define EONCE_SERVICES_LEDGER_LEDGER_H_

#include <vector>

#include "absl/status/statusor.h"
#include "common/store/rocks.h"
#include "eonce/ledger/v1/ledger.pb.h"
#include "services/ledger/account_cache.h"
#include "services/inbox/inbox.h"

namespace eonce {

struct LedgerOptions {
  // Sharded: a transfer between accounts of two slots debits here and emits a Credit
  // follow-up for the other slot's owner (the inbox's transactional outbox), since the
  // two accounts may live on two shards; and every account is filed under its slot, to
  // move with it. Off: every transfer is one atomic batch, and nothing is filed.
  bool cross_slot_credits = false;
  // Accounts kept in memory as last written (AccountCache); 0: none.
  size_t account_cache_entries = AccountCache::kDefaultEntries;
};

class LedgerCore {
 public:
  // The largest amount one call may move or mint; keeps every sum far from overflow.
  static constexpr int64_t kMaxAmount = 1'000'000'000'000;

  // Column families the ledger needs besides the inbox's.
  static std::vector<ColumnFamilySpec> ColumnFamilies();

  LedgerCore(RocksStore& store, Inbox& inbox, LedgerOptions options = {});
  ~LedgerCore();
  LedgerCore(const LedgerCore&) = delete;
  LedgerCore& operator=(const LedgerCore&) = delete;

  absl::StatusOr<v1::CallResult> OpenAccount(const CallIdentity& identity,
                                             const ledger::v1::OpenAccountRequest& request);
  absl::StatusOr<v1::CallResult> Transfer(const CallIdentity& identity,
                                          const ledger::v1::TransferRequest& request);
  absl::StatusOr<v1::CallResult> Credit(const CallIdentity& identity,
                                        const ledger::v1::CreditRequest& request);

  // NOT_FOUND for an unknown account, and for one another tenant opened (two tenants may
  // each have an account of one id: accounts are keyed by tenant and id). An empty
  // `tenant` (a caller that did not come through the sidecar, which always names one)
  // reads an account of that id, whoever's.
  absl::StatusOr<ledger::v1::Account> GetAccount(const std::string& tenant,
                                                 const std::string& id);
  // Read from one snapshot, so the totals are consistent with each other. Counts the
  // accounts and counters of the slots `request` names, else of every slot this ledger
  // has not handed off (an export, import or drop, until its sidecar holds it again or a
  // newer write lands: SlotFences): see GetTotalRequest.
  absl::StatusOr<ledger::v1::GetTotalResponse> GetTotal(
      const ledger::v1::GetTotalRequest& request = {});

  // Accounts an older ledger keyed by their id alone are keyed by tenant and id, in synced
  // batches. Run first at start, before anything is served. Returns how many it moved.
  absl::StatusOr<int64_t> MigrateAccountKeys();
  static constexpr int kMigrateBatch = 10'000;
  // Accounts opened before the ledger kept each one's tenant get the tenant of their
  // OpenAccount effect (the effect ledger names it), in one synced batch; one whose effect
  // is gone keeps none (and stays reachable to every tenant). Run once at start, before
  // anything is served; a second run finds nothing to do. Returns how many it gave one.
  absl::StatusOr<int64_t> AdoptTenantsFromEffects();
  // Sharded: files every account and every slot's counter under its slot (written before,
  // or while the ledger ran unsharded), in one synced batch, so that a slot move takes
  // them. Run once at start; unsharded, it does nothing.
  absl::Status FileAccounts();

  const AccountCache& account_cache() const { return accounts_; }

 private:
  // `tenant`'s account `id`, else the one of that id opened before accounts named their
  // tenant (every tenant's); for an empty tenant, any account of that id. From memory, or
  // from the store; `locked`: the caller holds the account's entity lock, and what the
  // store returns is kept (AccountCache).
  absl::StatusOr<std::optional<ledger::v1::Account>> ReadAccount(const std::string& tenant,
                                                                 const std::string& id,
                                                                 bool locked = true);
  absl::StatusOr<std::optional<ledger::v1::Account>> ReadKey(const std::string& key,
                                                             bool locked,
                                                             bool from_memory = true);
  // Writes `account` (filed under its slot) in `batch`, and forgets what memory kept of it
  // (the caller keeps the new value once the batch is written, or clears the cache).
  void PutAccount(rocksdb::WriteBatch* batch, const ledger::v1::Account& account);
  // The debit half of a transfer to another slot (cross_slot_credits).
  absl::StatusOr<v1::CallResult> Debit(const CallIdentity& identity,
                                       const ledger::v1::TransferRequest& request);
  // Writes `batch`, synced, from a pass that holds no account's lock (the passes at
  // start), then clears what memory kept of the accounts, whatever the write's result.
  absl::Status WriteWithoutLocks(rocksdb::WriteBatch* batch, const char* what);
  // Adds `delta` to `slot`'s counter `name` in `batch` (filed under the slot, sharded).
  absl::Status AddToCounter(rocksdb::WriteBatch* batch, const char* name, uint32_t slot,
                            int64_t delta);

  RocksStore& store_;
  Inbox& inbox_;
  const LedgerOptions options_;
  AccountCache accounts_;
};

}  // namespace eonce

#endif  // EONCE_SERVICES_LEDGER_LEDGER_H_
