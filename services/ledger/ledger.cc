#include "services/ledger/ledger.h"

#include <memory>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/coord/slots.h"
#include "common/base/status.h"
#include "services/ledger/ledger_internal.h"

namespace eonce {

using ledger_internal::AccountEffect;
using ledger_internal::AccountEntity;
using ledger_internal::BadAccountId;
using ledger_internal::BadAmount;
using ledger_internal::CounterKey;
using ledger_internal::DecodeInt;
using ledger_internal::EncodeInt;
using ledger_internal::kAccountsCf;
using ledger_internal::KeyOf;
using ledger_internal::kMinted;
using ledger_internal::kReceived;
using ledger_internal::kSent;
using ledger_internal::kUnclaimed;
using ledger_internal::ParseKey;
using ledger_internal::Reject;

std::vector<ColumnFamilySpec> LedgerCore::ColumnFamilies() {
  // A transfer reads accounts that exist: no memtable filter. It rewrites them, and a busy
  // account is rewritten many times in each memtable: a new version goes right before
  // the last, where that account's last insert went (its key begins with its id, at most
  // 64 bytes).
  ColumnFamilySpec accounts{kAccountsCf, {}};
  accounts.lookups_miss = false;
  accounts.hint_tag_bytes = 64;
  return {accounts};
}

LedgerCore::LedgerCore(RocksStore& store, Inbox& inbox, LedgerOptions options)
    : store_(store),
      inbox_(inbox),
      options_(options),
      accounts_(options.account_cache_entries) {
  inbox_.SetSlotRowsReplaced([this] { accounts_.Clear(); });
}

LedgerCore::~LedgerCore() { inbox_.SetSlotRowsReplaced(nullptr); }

void LedgerCore::PutAccount(rocksdb::WriteBatch* batch, const ledger::v1::Account& account) {
  const std::string key = AccountKey(account);
  accounts_.Forget(key);
  if (!options_.cross_slot_credits) {
    // Unsharded: nothing moves, so nothing is filed by slot (FileAccounts files every
    // account at the first start with sharding on).
    batch->Put(store_.cf(kAccountsCf), key, account.SerializeAsString());
    return;
  }
  inbox_.PutEntityRow(batch, account.tenant(), "account", account.id(), kAccountsCf, key,
                      account.SerializeAsString());
}

absl::Status LedgerCore::WriteWithoutLocks(rocksdb::WriteBatch* batch, const char* what) {
  absl::Status written = store_.Write(batch, /*sync=*/true, what);
  accounts_.Clear();
  return written;
}

absl::Status LedgerCore::AddToCounter(rocksdb::WriteBatch* batch, const char* name,
                                      uint32_t slot, int64_t delta) {
  const std::string key = CounterKey(name, slot);
  std::string value;
  rocksdb::Status status = store_.Get(kAccountsCf, key, &value);
  if (!status.ok() && !status.IsNotFound()) return FromRocks(status, "read counter");
  if (options_.cross_slot_credits) {
    inbox_.PutSlotRow(batch, slot, kAccountsCf, key, EncodeInt(DecodeInt(value) + delta));
  } else {
    batch->Put(store_.cf(kAccountsCf), key, EncodeInt(DecodeInt(value) + delta));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<ledger::v1::Account>> LedgerCore::ReadAccount(
    const std::string& tenant, const std::string& id, bool locked) {
  if (tenant.empty()) {
    // A caller that names no tenant (not through the sidecar) reads an account of that id,
    // whoever's: the first under the id's prefix.
    const std::string prefix = AccountKey("", id);
    std::unique_ptr<rocksdb::Iterator> it = store_.NewIterator(kAccountsCf);
    it->Seek(prefix);
    EONCE_RETURN_IF_ERROR(FromRocks(it->status(), "read account"));
    if (!it->Valid() || !it->key().starts_with(prefix)) {
      return std::optional<ledger::v1::Account>();
    }
    return ReadKey(it->key().ToString(), /*locked=*/false, /*from_memory=*/false);
  }
  // The tenant's own, else one opened before accounts named their tenant (every tenant's;
  // rare, and read from the store, so that memory is looked in once per account read).
  EONCE_ASSIGN_OR_RETURN(auto own, ReadKey(AccountKey(tenant, id), locked));
  if (own.has_value()) return own;
  return ReadKey(AccountKey("", id), /*locked=*/false, /*from_memory=*/false);
}

absl::StatusOr<std::optional<ledger::v1::Account>> LedgerCore::ReadKey(const std::string& key,
                                                                       bool locked,
                                                                       bool from_memory) {
  uint64_t generation = 0;
  if (from_memory) {
    if (std::optional<ledger::v1::Account> kept = accounts_.Get(key, &generation)) return kept;
  }
  std::string value;
  rocksdb::Status status = store_.Get(kAccountsCf, key, &value);
  if (status.IsNotFound()) return std::optional<ledger::v1::Account>();
  EONCE_RETURN_IF_ERROR(FromRocks(status, "read account"));
  ledger::v1::Account account;
  if (!account.ParseFromString(value)) {
    return Error(absl::StatusCode::kDataLoss, "STORE_CORRUPT", "undecodable account");
  }
  if (locked) accounts_.Fill(account, generation);
  return std::optional<ledger::v1::Account>(std::move(account));
}

absl::StatusOr<v1::CallResult> LedgerCore::OpenAccount(
    const CallIdentity& identity, const ledger::v1::OpenAccountRequest& request) {
  std::string entity = AccountEntity(request.id());
  const uint32_t slot = SlotOf(identity.tenant, "account", request.id());
  const std::string minted = CounterKey(kMinted, slot);
  return inbox_.Run(identity, {entity, minted},
                    [&](rocksdb::WriteBatch* batch, uint64_t) -> absl::StatusOr<Applied> {
    if (auto bad = BadAccountId(request.id(), "id")) return *bad;
    if (request.initial_balance() < 0 || request.initial_balance() > kMaxAmount) {
      return Reject(absl::StatusCode::kInvalidArgument, "INVALID_REQUEST",
                    absl::StrCat("initial_balance must be in [0, ", kMaxAmount, "]"));
    }
    EONCE_ASSIGN_OR_RETURN(auto existing, ReadAccount(identity.tenant, request.id()));
    if (existing.has_value()) {
      return Reject(absl::StatusCode::kAlreadyExists, "ACCOUNT_EXISTS",
                    absl::StrCat("account ", request.id(), " exists"));
    }
    ledger::v1::Account account;
    account.set_id(request.id());
    account.set_balance(request.initial_balance());
    account.set_revision(1);
    account.set_tenant(identity.tenant);
    PutAccount(batch, account);
    EONCE_RETURN_IF_ERROR(AddToCounter(batch, kMinted, slot, request.initial_balance()));
    Applied applied;
    applied.on_written = accounts_.KeepWhenWritten({account});
    applied.result.set_response(account.SerializeAsString());
    applied.effect = AccountEffect(entity, "/eonce.ledger.v1.Ledger/OpenAccount",
                                   request.initial_balance(), 1);
    return applied;
  });
}

absl::StatusOr<v1::CallResult> LedgerCore::Transfer(const CallIdentity& identity,
                                                    const ledger::v1::TransferRequest& request) {
  if (options_.cross_slot_credits && request.from() != request.to() &&
      SlotOf(identity.tenant, "account", request.from()) !=
          SlotOf(identity.tenant, "account", request.to())) {
    return Debit(identity, request);
  }
  std::string from_entity = AccountEntity(request.from());
  std::string to_entity = AccountEntity(request.to());
  return inbox_.Run(identity, {from_entity, to_entity},
                    [&](rocksdb::WriteBatch* batch, uint64_t seq) -> absl::StatusOr<Applied> {
    if (auto bad = BadAmount(request.amount())) return *bad;
    if (request.from() == request.to()) {
      return Reject(absl::StatusCode::kInvalidArgument, "INVALID_REQUEST",
                    "from and to must differ");
    }
    // Another tenant's account is no account of this caller's (it is not read): the same
    // answer as an unknown one, so that it learns nothing of it.
    EONCE_ASSIGN_OR_RETURN(auto from, ReadAccount(identity.tenant, request.from()));
    EONCE_ASSIGN_OR_RETURN(auto to, ReadAccount(identity.tenant, request.to()));
    if (!from.has_value() || !to.has_value()) {
      return Reject(absl::StatusCode::kNotFound, "NO_SUCH_ACCOUNT",
                    absl::StrCat("no account ", from.has_value() ? request.to() : request.from()));
    }
    if (from->balance() < request.amount()) {
      return Reject(absl::StatusCode::kFailedPrecondition, "INSUFFICIENT_FUNDS",
                    absl::StrCat("account ", request.from(), " holds ", from->balance(),
                                 ", needs ", request.amount()));
    }
    from->set_balance(from->balance() - request.amount());
    from->set_revision(from->revision() + 1);
    to->set_balance(to->balance() + request.amount());
    to->set_revision(to->revision() + 1);
    PutAccount(batch, *from);
    PutAccount(batch, *to);

    ledger::v1::TransferResponse response;
    response.set_from_balance(from->balance());
    response.set_to_balance(to->balance());
    response.set_effect_seq(seq);
    Applied applied;
    applied.on_written = accounts_.KeepWhenWritten({*from, *to});
    applied.result.set_response(response.SerializeAsString());
    applied.effect = AccountEffect(from_entity, "/eonce.ledger.v1.Ledger/Transfer",
                                   request.amount(), from->revision());
    return applied;
  });
}

absl::StatusOr<ledger::v1::Account> LedgerCore::GetAccount(const std::string& tenant,
                                                          const std::string& id) {
  EONCE_ASSIGN_OR_RETURN(auto account, ReadAccount(tenant, id, /*locked=*/false));
  if (!account.has_value()) {
    return Error(absl::StatusCode::kNotFound, "NO_SUCH_ACCOUNT", absl::StrCat("no account ", id));
  }
  return *account;
}

absl::StatusOr<ledger::v1::GetTotalResponse> LedgerCore::GetTotal(
    const ledger::v1::GetTotalRequest& request) {
  // Which slots are counted: the ones the caller names (those its slot map gives this
  // shard), else every slot this ledger has not handed off. A slot is handed off once an
  // export, a drop or an import raised its fence (SlotFences), until a write of a newer
  // epoch or the owner's HoldSlotData takes it back: the old owner stops counting it at
  // the export, the new one starts once its sidecar holds the flip (an aborted copy is
  // never counted), so no slot is counted twice while both hold a copy.
  std::vector<bool> counted(kSlotCount, request.slots().empty());
  for (uint32_t slot : request.slots()) {
    if (slot >= kSlotCount) {
      return Error(absl::StatusCode::kInvalidArgument, "INVALID_FIELD",
                   absl::StrCat("slots: ", slot, " is not below ", kSlotCount));
    }
    counted[slot] = true;
  }
  if (request.slots().empty()) {
    for (uint32_t slot = 0; slot < kSlotCount; ++slot) {
      if (inbox_.fences().handed_off(slot)) counted[slot] = false;
    }
  }
  std::shared_ptr<const rocksdb::Snapshot> snapshot = store_.Snapshot();
  ledger::v1::GetTotalResponse total;
  std::unique_ptr<rocksdb::Iterator> it = store_.NewIterator(kAccountsCf, snapshot.get());
  absl::Status result;
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    const KeyOf key = ParseKey(absl::string_view(it->key().data(), it->key().size()));
    if (key.kind == KeyOf::Kind::kCounter) {
      // A ledger-wide counter of before (no slot) is this ledger's own: always counted.
      if (key.slot.has_value() && (*key.slot >= kSlotCount || !counted[*key.slot])) continue;
      const int64_t value = DecodeInt(it->value().ToString());
      if (key.counter == kMinted) total.set_total_minted(total.total_minted() + value);
      if (key.counter == kSent) total.set_credits_sent(total.credits_sent() + value);
      if (key.counter == kReceived) total.set_credits_received(total.credits_received() + value);
      if (key.counter == kUnclaimed) total.set_unclaimed(total.unclaimed() + value);
      continue;
    }
    ledger::v1::Account account;
    if (!account.ParseFromArray(it->value().data(), static_cast<int>(it->value().size()))) {
      result = Error(absl::StatusCode::kDataLoss, "STORE_CORRUPT", "undecodable account");
      break;
    }
    if (!counted[SlotOf(account.tenant(), "account", account.id())]) continue;
    total.set_total_balance(total.total_balance() + account.balance());
    total.set_accounts(total.accounts() + 1);
  }
  if (result.ok()) result = FromRocks(it->status(), "scan accounts");
  it.reset();
  if (!result.ok()) return result;
  return total;
}

}  // namespace eonce
