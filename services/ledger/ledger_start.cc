// The ledger's passes at start, over data an older ledger wrote: account keys that name
// the tenant, tenants adopted from the effect ledger, accounts and counters filed by slot.
// Each runs before anything is served, and a second run finds nothing to do. See ledger.h.
#include <map>
#include <memory>
#include <utility>

#include "common/base/status.h"
#include "services/ledger/ledger.h"
#include "services/ledger/ledger_internal.h"

namespace eonce {

using ledger_internal::kAccountsCf;
using ledger_internal::KeyOf;
using ledger_internal::ParseKey;

namespace {

KeyOf::Kind KindOf(const rocksdb::Slice& key) {
  return ParseKey(absl::string_view(key.data(), key.size())).kind;
}

absl::StatusOr<ledger::v1::Account> ParseAccount(const rocksdb::Slice& value) {
  ledger::v1::Account account;
  if (!account.ParseFromArray(value.data(), static_cast<int>(value.size()))) {
    return Error(absl::StatusCode::kDataLoss, "STORE_CORRUPT", "undecodable account");
  }
  return account;
}

}  // namespace

absl::StatusOr<int64_t> LedgerCore::MigrateAccountKeys() {
  int64_t moved = 0;
  // In synced batches of at most kMigrateBatch accounts; each moves its accounts whole (the
  // new key and the old key's deletion together), so a crash between two leaves the rest
  // for the next start. Bounded: every round moves at least one account or ends the pass.
  for (int round = 0; round < 1'000'000; ++round) {
    rocksdb::WriteBatch batch;
    int in_batch = 0;
    std::unique_ptr<rocksdb::Iterator> it = store_.NewIterator(kAccountsCf);
    for (it->SeekToFirst(); it->Valid() && in_batch < kMigrateBatch; it->Next()) {
      if (KindOf(it->key()) != KeyOf::Kind::kLegacyAccount) continue;
      EONCE_ASSIGN_OR_RETURN(ledger::v1::Account account, ParseAccount(it->value()));
      if (account.id().empty()) account.set_id(it->key().ToString());
      // The old key's slot index entry (sharded) is left: it names a key that is gone,
      // which an export skips and a drop deletes.
      batch.Delete(store_.cf(kAccountsCf), it->key());
      PutAccount(&batch, account);
      ++in_batch;
    }
    EONCE_RETURN_IF_ERROR(FromRocks(it->status(), "scan accounts"));
    it.reset();
    if (in_batch == 0) break;
    EONCE_RETURN_IF_ERROR(WriteWithoutLocks(&batch, "account keys"));
    moved += in_batch;
  }
  return moved;
}

absl::StatusOr<int64_t> LedgerCore::AdoptTenantsFromEffects() {
  // The accounts without a tenant, by id, with their keys; usually none, and then the
  // effects are not read.
  std::map<std::string, std::pair<std::string, ledger::v1::Account>> unowned;
  {
    std::unique_ptr<rocksdb::Iterator> it = store_.NewIterator(kAccountsCf);
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      if (KindOf(it->key()) == KeyOf::Kind::kCounter) continue;
      EONCE_ASSIGN_OR_RETURN(ledger::v1::Account account, ParseAccount(it->value()));
      if (!account.tenant().empty()) continue;
      std::string id = account.id();
      unowned[id] = {it->key().ToString(), std::move(account)};
    }
    EONCE_RETURN_IF_ERROR(FromRocks(it->status(), "scan accounts"));
  }
  if (unowned.empty()) return 0;
  rocksdb::WriteBatch batch;
  int64_t adopted = 0;
  uint64_t after = 0;
  // Page through the effect ledger (bounded: each page moves `after` on or ends the scan).
  for (int page = 0; page < 10'000'000; ++page) {
    EONCE_ASSIGN_OR_RETURN(v1::ListEffectsResponse effects, inbox_.ListEffects(after, 10'000));
    for (const v1::Effect& effect : effects.effects()) {
      if (effect.method() != "/eonce.ledger.v1.Ledger/OpenAccount" || effect.tenant().empty() ||
          effect.entity().rfind("account/", 0) != 0) {
        continue;
      }
      auto it = unowned.find(effect.entity().substr(8));
      if (it == unowned.end() || !it->second.second.tenant().empty()) continue;
      // Its key names its tenant now: the key without one goes in the same batch.
      it->second.second.set_tenant(effect.tenant());
      batch.Delete(store_.cf(kAccountsCf), it->second.first);
      PutAccount(&batch, it->second.second);
      ++adopted;
    }
    if (effects.last_seq() <= after) break;
    after = effects.last_seq();
  }
  if (adopted > 0) EONCE_RETURN_IF_ERROR(WriteWithoutLocks(&batch, "account tenants"));
  return adopted;
}

absl::Status LedgerCore::FileAccounts() {
  if (!options_.cross_slot_credits) return absl::OkStatus();
  rocksdb::WriteBatch batch;
  std::unique_ptr<rocksdb::Iterator> it = store_.NewIterator(kAccountsCf);
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    const KeyOf key = ParseKey(absl::string_view(it->key().data(), it->key().size()));
    if (key.kind == KeyOf::Kind::kCounter) {
      // A slot's counter moves with it; a ledger-wide one of before stays.
      if (key.slot.has_value() && *key.slot < kSlotCount) {
        inbox_.PutSlotRow(&batch, *key.slot, kAccountsCf, it->key().ToString(),
                          it->value().ToString());
      }
      continue;
    }
    EONCE_ASSIGN_OR_RETURN(ledger::v1::Account account, ParseAccount(it->value()));
    PutAccount(&batch, account);
  }
  EONCE_RETURN_IF_ERROR(FromRocks(it->status(), "scan accounts"));
  if (batch.Count() == 0) return absl::OkStatus();
  return WriteWithoutLocks(&batch, "file accounts");
}

}  // namespace eonce
