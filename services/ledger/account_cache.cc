#include "services/ledger/account_cache.h"

#include <algorithm>
#include <utility>

namespace eonce {

AccountCache::AccountCache(size_t max_entries)
    : max_entries_(std::min(max_entries, kMaxEntries)) {}

std::string AccountKey(absl::string_view tenant, absl::string_view id) {
  std::string key(id);
  key.push_back('\0');
  key.append(tenant.data(), tenant.size());
  return key;
}

std::optional<ledger::v1::Account> AccountCache::Get(const std::string& key,
                                                     uint64_t* generation) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    misses_.fetch_add(1, std::memory_order_relaxed);
    if (generation != nullptr) *generation = generation_;
    return std::nullopt;
  }
  hits_.fetch_add(1, std::memory_order_relaxed);
  return it->second;
}

uint64_t AccountCache::Generation() const {
  absl::MutexLock lock(&mu_);
  return generation_;
}

void AccountCache::Fill(const ledger::v1::Account& account, uint64_t generation) {
  absl::MutexLock lock(&mu_);
  if (generation != generation_) return;
  KeepLocked(account, /*replace=*/false);
}

void AccountCache::Forget(const std::string& key) {
  absl::MutexLock lock(&mu_);
  entries_.erase(key);
}

std::function<void()> AccountCache::KeepWhenWritten(std::vector<ledger::v1::Account> accounts) {
  const uint64_t generation = Generation();
  return [this, accounts = std::move(accounts), generation] {
    absl::MutexLock lock(&mu_);
    if (generation != generation_) return;
    for (const ledger::v1::Account& account : accounts) KeepLocked(account, /*replace=*/true);
  };
}

void AccountCache::Clear() {
  absl::MutexLock lock(&mu_);
  ++generation_;
  entries_.clear();
}

size_t AccountCache::size() const {
  absl::MutexLock lock(&mu_);
  return entries_.size();
}

void AccountCache::KeepLocked(const ledger::v1::Account& account, bool replace) {
  if (max_entries_ == 0) return;
  std::string key = AccountKey(account);
  auto it = entries_.find(key);
  if (it != entries_.end()) {
    if (replace) it->second = account;
    return;
  }
  if (entries_.size() >= max_entries_) entries_.clear();
  entries_.emplace(std::move(key), account);
}

}  // namespace eonce
