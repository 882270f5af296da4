// AccountCache: the ledger's accounts as last written, kept in memory, so that a
// transfer reads its two accounts without a search of RocksDB's memtables for each (those
// two searches were 6% of a first-seen command's CPU with the sidecar in process).
//
// An entry is always the store's account as of the last write that ended:
//   - the ledger's own writes hold the account's entity lock: they forget the entry as
//     they put the account in their batch (Forget), and keep the new value once the batch
//     is written (the function KeepWhenWritten returns); a batch that fails keeps nothing;
//   - a read that misses, under the same lock, fills the entry with what the store
//     returned (Fill); a read without the lock (GetAccount) does not fill;
//   - writes that hold no entity lock (slot rows imported or dropped, the passes at
//     start) clear the whole cache once they are written (Clear).
// A fill or a keep carries the generation it began in, and is refused if a Clear came
// since: an account read or written before a lockless write is never kept after it.
//
// Bounded by entries; at the bound it starts over empty. 0 keeps nothing. Thread-safe.
#ifndef EONCE_SERVICES_LEDGER_ACCOUNT_CACHE_H_
#define EONCE_SERVICES_LEDGER_ACCOUNT_CACHE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "eonce/ledger/v1/ledger.pb.h"

namespace eonce {

// An account's key, in the store and here: its id, a NUL, its tenant (none for an account
// opened before accounts named one). Two tenants' accounts of one id are two accounts;
// the id comes first so that a caller that names no tenant finds an id's account by it.
std::string AccountKey(absl::string_view tenant, absl::string_view id);
inline std::string AccountKey(const ledger::v1::Account& account) {
  return AccountKey(account.tenant(), account.id());
}

class AccountCache {
 public:
  static constexpr size_t kDefaultEntries = 65'536;
  static constexpr size_t kMaxEntries = 16'777'216;

  explicit AccountCache(size_t max_entries = kDefaultEntries);

  // The account kept at `key` (AccountKey), if any (counted as a hit or a miss); on a
  // miss, `*generation`, if given, is what a Fill of the account read from the store needs.
  std::optional<ledger::v1::Account> Get(const std::string& key, uint64_t* generation = nullptr);
  uint64_t Generation() const;
  // Keeps what the store returned for `account`, unless a Clear came after
  // `generation` (from the Get that missed) or an entry is already there (a write under
  // the same lock put it).
  void Fill(const ledger::v1::Account& account, uint64_t generation);
  void Forget(const std::string& key);
  // To run once the batch that writes `accounts` is written: keeps each of them, unless a
  // Clear came between this call and that one.
  std::function<void()> KeepWhenWritten(std::vector<ledger::v1::Account> accounts);
  void Clear();

  size_t size() const;
  int64_t hits() const { return hits_.load(std::memory_order_relaxed); }
  int64_t misses() const { return misses_.load(std::memory_order_relaxed); }

 private:
  void KeepLocked(const ledger::v1::Account& account, bool replace)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t max_entries_;
  mutable absl::Mutex mu_;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<std::string, ledger::v1::Account> entries_ ABSL_GUARDED_BY(mu_);
  std::atomic<int64_t> hits_{0};
  std::atomic<int64_t> misses_{0};
};

}  // namespace eonce

#endif  // EONCE_SERVICES_LEDGER_ACCOUNT_CACHE_H_
