#include "services/ledger/ledger.h"

#include <map>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/big_endian.h"
#include "common/command.h"
#include "common/slots.h"
#include "common/status.h"

namespace eonce {
namespace {

constexpr char kAccountsCf[] = "accounts";
// Counters, in the accounts column family ("/" is in no account id).
constexpr char kMintedKey[] = "ledger/minted";
constexpr char kSentKey[] = "ledger/credits_sent";
constexpr char kReceivedKey[] = "ledger/credits_received";
constexpr char kUnclaimedKey[] = "ledger/unclaimed";
constexpr char kCounterPrefix[] = "ledger/";
constexpr char kCreditMethod[] = "/eonce.ledger.v1.Ledger/Credit";

int64_t DecodeInt(const std::string& value) {
  return static_cast<int64_t>(ReadBigEndian64(value));
}

std::string EncodeInt(int64_t value) { return BigEndian64(static_cast<uint64_t>(value)); }

Applied Reject(absl::StatusCode code, const std::string& reason, const std::string& detail) {
  Applied applied;
  applied.result = RejectionResult(code, reason, detail);
  return applied;
}

std::string AccountEntity(const std::string& id) { return absl::StrCat("account/", id); }

// The effect a mutation appends to the effect ledger.
v1::Effect AccountEffect(const std::string& entity, const char* method, int64_t amount,
                         int64_t revision) {
  v1::Effect effect;
  effect.set_entity(entity);
  effect.set_method(method);
  effect.set_amount(amount);
  effect.set_revision(revision);
  return effect;
}

// The rejection of an amount out of [1, kMaxAmount], or none.
std::optional<Applied> BadAmount(int64_t amount) {
  if (amount > 0 && amount <= LedgerCore::kMaxAmount) return std::nullopt;
  return Reject(absl::StatusCode::kInvalidArgument, "INVALID_REQUEST",
                absl::StrCat("amount must be in [1, ", LedgerCore::kMaxAmount, "]"));
}

// The rejection of an account id that is not 1..64 letters, digits or ._@-, or none.
std::optional<Applied> BadAccountId(const std::string& id, const char* field) {
  if (ValidateName(id, 64, field).ok()) return std::nullopt;
  return Reject(absl::StatusCode::kInvalidArgument, "INVALID_REQUEST",
                absl::StrCat(field, " must be 1..64 letters, digits or ._@-"));
}

// Whether a call for `tenant` may move or read `account`: its own, one opened before
// accounts named their tenant, or any for a caller that names no tenant (not through the
// sidecar).
bool Reaches(const std::string& tenant, const ledger::v1::Account& account) {
  return tenant.empty() || account.tenant().empty() || account.tenant() == tenant;
}

}  // namespace

std::vector<ColumnFamilySpec> LedgerCore::ColumnFamilies() {
  // A transfer reads accounts that exist: no memtable filter. It rewrites them, and a busy
  // account is rewritten many times in each memtable: a new version goes right before
  // the last, where that account's last insert went (an id is at most 64 bytes).
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
  accounts_.Forget(account.id());
  if (!options_.cross_slot_credits) {
    // Unsharded: nothing moves, so nothing is filed by slot (FileAccounts files every
    // account at the first start with sharding on).
    batch->Put(store_.cf(kAccountsCf), account.id(), account.SerializeAsString());
    return;
  }
  inbox_.PutEntityRow(batch, account.tenant(), "account", account.id(), kAccountsCf, account.id(),
                      account.SerializeAsString());
}

absl::Status LedgerCore::WriteWithoutLocks(rocksdb::WriteBatch* batch, const char* what) {
  absl::Status written = store_.Write(batch, /*sync=*/true, what);
  accounts_.Clear();
  return written;
}

absl::Status LedgerCore::AddToCounter(rocksdb::WriteBatch* batch, const char* key,
                                      int64_t delta) {
  std::string value;
  rocksdb::Status status = store_.Get(kAccountsCf, key, &value);
  if (!status.ok() && !status.IsNotFound()) return FromRocks(status, "read counter");
  batch->Put(store_.cf(kAccountsCf), key, EncodeInt(DecodeInt(value) + delta));
  return absl::OkStatus();
}

absl::StatusOr<std::optional<ledger::v1::Account>> LedgerCore::ReadAccount(
    const std::string& id, bool locked) {
  uint64_t generation = 0;
  if (std::optional<ledger::v1::Account> kept = accounts_.Get(id, &generation)) return kept;
  std::string value;
  rocksdb::Status status = store_.Get(kAccountsCf, id, &value);
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
  return inbox_.Run(identity, {entity, kMintedKey},
                    [&](rocksdb::WriteBatch* batch, uint64_t) -> absl::StatusOr<Applied> {
    if (auto bad = BadAccountId(request.id(), "id")) return *bad;
    if (request.initial_balance() < 0 || request.initial_balance() > kMaxAmount) {
      return Reject(absl::StatusCode::kInvalidArgument, "INVALID_REQUEST",
                    absl::StrCat("initial_balance must be in [0, ", kMaxAmount, "]"));
    }
    EONCE_ASSIGN_OR_RETURN(auto existing, ReadAccount(request.id()));
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
    EONCE_RETURN_IF_ERROR(AddToCounter(batch, kMintedKey, request.initial_balance()));
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
    EONCE_ASSIGN_OR_RETURN(auto from, ReadAccount(request.from()));
    EONCE_ASSIGN_OR_RETURN(auto to, ReadAccount(request.to()));
    // Another tenant's account is no account of this caller's: the same answer as an
    // unknown one, so that it learns nothing of it.
    if (from.has_value() && !Reaches(identity.tenant, *from)) from.reset();
    if (to.has_value() && !Reaches(identity.tenant, *to)) to.reset();
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
  EONCE_ASSIGN_OR_RETURN(auto account, ReadAccount(id, /*locked=*/false));
  if (!account.has_value() || !Reaches(tenant, *account)) {
    return Error(absl::StatusCode::kNotFound, "NO_SUCH_ACCOUNT", absl::StrCat("no account ", id));
  }
  return *account;
}

absl::StatusOr<ledger::v1::GetTotalResponse> LedgerCore::GetTotal() {
  std::shared_ptr<const rocksdb::Snapshot> snapshot = store_.Snapshot();
  ledger::v1::GetTotalResponse total;
  std::unique_ptr<rocksdb::Iterator> it = store_.NewIterator(kAccountsCf, snapshot.get());
  absl::Status result;
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    if (it->key().starts_with(kCounterPrefix)) {
      const int64_t value = DecodeInt(it->value().ToString());
      if (it->key() == kMintedKey) total.set_total_minted(value);
      if (it->key() == kSentKey) total.set_credits_sent(value);
      if (it->key() == kReceivedKey) total.set_credits_received(value);
      if (it->key() == kUnclaimedKey) total.set_unclaimed(value);
      continue;
    }
    ledger::v1::Account account;
    if (!account.ParseFromArray(it->value().data(), static_cast<int>(it->value().size()))) {
      result = Error(absl::StatusCode::kDataLoss, "STORE_CORRUPT", "undecodable account");
      break;
    }
    total.set_total_balance(total.total_balance() + account.balance());
    total.set_accounts(total.accounts() + 1);
  }
  if (result.ok()) result = FromRocks(it->status(), "scan accounts");
  it.reset();
  if (!result.ok()) return result;
  return total;
}

}  // namespace eonce

namespace eonce {

absl::StatusOr<int64_t> LedgerCore::AdoptTenantsFromEffects() {
  // The accounts without a tenant; usually none, and then the effects are not read.
  std::map<std::string, ledger::v1::Account> unowned;
  {
    std::unique_ptr<rocksdb::Iterator> it = store_.NewIterator(kAccountsCf);
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      if (it->key().starts_with(kCounterPrefix)) continue;
      ledger::v1::Account account;
      if (!account.ParseFromArray(it->value().data(), static_cast<int>(it->value().size()))) {
        return Error(absl::StatusCode::kDataLoss, "STORE_CORRUPT", "undecodable account");
      }
      if (account.tenant().empty()) unowned[it->key().ToString()] = std::move(account);
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
      if (it == unowned.end() || !it->second.tenant().empty()) continue;
      it->second.set_tenant(effect.tenant());
      PutAccount(&batch, it->second);
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
    if (it->key().starts_with(kCounterPrefix)) continue;
    ledger::v1::Account account;
    if (!account.ParseFromArray(it->value().data(), static_cast<int>(it->value().size()))) {
      return Error(absl::StatusCode::kDataLoss, "STORE_CORRUPT", "undecodable account");
    }
    PutAccount(&batch, account);
  }
  EONCE_RETURN_IF_ERROR(FromRocks(it->status(), "scan accounts"));
  if (batch.Count() == 0) return absl::OkStatus();
  return WriteWithoutLocks(&batch, "file accounts");
}

absl::StatusOr<v1::CallResult> LedgerCore::Debit(const CallIdentity& identity,
                                                 const ledger::v1::TransferRequest& request) {
  std::string from_entity = AccountEntity(request.from());
  return inbox_.Run(identity, {from_entity, kSentKey},
                    [&](rocksdb::WriteBatch* batch, uint64_t seq) -> absl::StatusOr<Applied> {
    if (auto bad = BadAmount(request.amount())) return *bad;
    if (auto bad = BadAccountId(request.to(), "to")) return *bad;
    if (identity.command_id.empty()) {
      // The credit's id is derived from the debit's: without one it could not be resent
      // as the same command.
      return Reject(absl::StatusCode::kFailedPrecondition, "COMMAND_ID_REQUIRED",
                    "a transfer to another slot needs a command id (send it through eonce)");
    }
    EONCE_ASSIGN_OR_RETURN(auto from, ReadAccount(request.from()));
    if (from.has_value() && !Reaches(identity.tenant, *from)) from.reset();
    if (!from.has_value()) {
      return Reject(absl::StatusCode::kNotFound, "NO_SUCH_ACCOUNT",
                    absl::StrCat("no account ", request.from()));
    }
    if (from->balance() < request.amount()) {
      return Reject(absl::StatusCode::kFailedPrecondition, "INSUFFICIENT_FUNDS",
                    absl::StrCat("account ", request.from(), " holds ", from->balance(),
                                 ", needs ", request.amount()));
    }
    from->set_balance(from->balance() - request.amount());
    from->set_revision(from->revision() + 1);
    PutAccount(batch, *from);
    EONCE_RETURN_IF_ERROR(AddToCounter(batch, kSentKey, request.amount()));

    ledger::v1::CreditRequest credit;
    credit.set_to(request.to());
    credit.set_amount(request.amount());
    credit.set_from(request.from());
    credit.set_transfer_command_id(identity.command_id);
    Applied applied;
    applied.on_written = accounts_.KeepWhenWritten({*from});
    applied.follow_ups.push_back(
        FollowUp{kCreditMethod, credit.SerializeAsString(), "account", request.to()});
    ledger::v1::TransferResponse response;
    response.set_from_balance(from->balance());
    response.set_effect_seq(seq);
    response.set_credit_command_id(
        Inbox::FollowUpCommandId(identity.tenant, identity.command_id, 0));
    applied.result.set_response(response.SerializeAsString());
    applied.effect = AccountEffect(from_entity, "/eonce.ledger.v1.Ledger/Transfer",
                                   request.amount(), from->revision());
    return applied;
  });
}

absl::StatusOr<v1::CallResult> LedgerCore::Credit(const CallIdentity& identity,
                                                  const ledger::v1::CreditRequest& request) {
  std::string to_entity = AccountEntity(request.to());
  return inbox_.Run(identity, {to_entity, kReceivedKey, kSentKey, kUnclaimedKey},
                    [&](rocksdb::WriteBatch* batch, uint64_t seq) -> absl::StatusOr<Applied> {
    if (auto bad = BadAmount(request.amount())) return *bad;
    if (auto bad = BadAccountId(request.from(), "from")) return *bad;
    EONCE_ASSIGN_OR_RETURN(auto to, ReadAccount(request.to()));
    if (to.has_value() && !Reaches(identity.tenant, *to)) to.reset();
    EONCE_RETURN_IF_ERROR(AddToCounter(batch, kReceivedKey, request.amount()));
    Applied applied;
    ledger::v1::CreditResponse response;
    response.set_effect_seq(seq);
    if (to.has_value()) {
      to->set_balance(to->balance() + request.amount());
      to->set_revision(to->revision() + 1);
      PutAccount(batch, *to);
      applied.on_written = accounts_.KeepWhenWritten({*to});
      response.set_to_balance(to->balance());
    } else if (!request.refund() && !identity.command_id.empty()) {
      // Bounced: the amount goes back to where it came from, as a refund.
      response.set_bounced(true);
      EONCE_RETURN_IF_ERROR(AddToCounter(batch, kSentKey, request.amount()));
      ledger::v1::CreditRequest refund;
      refund.set_to(request.from());
      refund.set_amount(request.amount());
      refund.set_from(request.to());
      refund.set_transfer_command_id(request.transfer_command_id());
      refund.set_refund(true);
      applied.follow_ups.push_back(
          FollowUp{kCreditMethod, refund.SerializeAsString(), "account", request.from()});
    } else {
      // A refund with nowhere to go (or a credit with no command id to derive one from)
      // is kept, counted, for an operator.
      response.set_bounced(true);
      EONCE_RETURN_IF_ERROR(AddToCounter(batch, kUnclaimedKey, request.amount()));
    }
    applied.result.set_response(response.SerializeAsString());
    applied.effect = AccountEffect(to_entity, kCreditMethod, request.amount(),
                                   to.has_value() ? to->revision() : 0);
    return applied;
  });
}

}  // namespace eonce
