// Key layouts and helpers shared by the ledger's source files; not an API.
#ifndef EONCE_SERVICES_LEDGER_LEDGER_INTERNAL_H_
#define EONCE_SERVICES_LEDGER_LEDGER_INTERNAL_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/base/big_endian.h"
#include "common/command/command.h"
#include "services/inbox/inbox.h"
#include "services/ledger/ledger.h"

namespace eonce {
namespace ledger_internal {

// Accounts (AccountKey: id \0 tenant) and counters, in one column family.
inline constexpr char kAccountsCf[] = "accounts";
// A counter's key is "ledger/<name>/<slot>" ("/" is in no account id): each slot's own,
// filed under the slot when sharded, so that it moves with the slot's accounts. Before,
// there was one per ledger, "ledger/<name>": still read (and counted by the ledger that
// holds it), never written.
inline constexpr char kCounterPrefix[] = "ledger/";
inline constexpr char kMinted[] = "minted";
inline constexpr char kSent[] = "credits_sent";
inline constexpr char kReceived[] = "credits_received";
inline constexpr char kUnclaimed[] = "unclaimed";
inline constexpr char kCreditMethod[] = "/eonce.ledger.v1.Ledger/Credit";

inline std::string CounterKey(const char* name, uint32_t slot) {
  return absl::StrCat(kCounterPrefix, name, "/", slot);
}

// A key of the accounts column family.
struct KeyOf {
  enum class Kind { kAccount, kLegacyAccount, kCounter } kind = Kind::kAccount;
  std::string counter;          // kCounter: its name
  std::optional<uint32_t> slot;  // kCounter: its slot; none for a ledger-wide one of before
};
inline KeyOf ParseKey(absl::string_view key) {
  KeyOf out;
  if (key.substr(0, sizeof(kCounterPrefix) - 1) == kCounterPrefix) {
    out.kind = KeyOf::Kind::kCounter;
    absl::string_view rest = key.substr(sizeof(kCounterPrefix) - 1);
    const size_t slash = rest.find('/');
    out.counter = std::string(rest.substr(0, slash));
    uint32_t slot = 0;
    if (slash != absl::string_view::npos && absl::SimpleAtoi(rest.substr(slash + 1), &slot)) {
      out.slot = slot;
    }
  } else if (key.find('\0') == absl::string_view::npos) {
    out.kind = KeyOf::Kind::kLegacyAccount;  // the id alone, before keys named the tenant
  }
  return out;
}

inline int64_t DecodeInt(const std::string& value) {
  return static_cast<int64_t>(ReadBigEndian64(value));
}

inline std::string EncodeInt(int64_t value) { return BigEndian64(static_cast<uint64_t>(value)); }

inline Applied Reject(absl::StatusCode code, const std::string& reason,
                      const std::string& detail) {
  Applied applied;
  applied.result = RejectionResult(code, reason, detail);
  return applied;
}

inline std::string AccountEntity(const std::string& id) { return absl::StrCat("account/", id); }

// The effect a mutation appends to the effect ledger.
inline v1::Effect AccountEffect(const std::string& entity, const char* method, int64_t amount,
                                int64_t revision) {
  v1::Effect effect;
  effect.set_entity(entity);
  effect.set_method(method);
  effect.set_amount(amount);
  effect.set_revision(revision);
  return effect;
}

// The rejection of an amount out of [1, kMaxAmount], or none.
inline std::optional<Applied> BadAmount(int64_t amount) {
  if (amount > 0 && amount <= LedgerCore::kMaxAmount) return std::nullopt;
  return Reject(absl::StatusCode::kInvalidArgument, "INVALID_REQUEST",
                absl::StrCat("amount must be in [1, ", LedgerCore::kMaxAmount, "]"));
}

// The rejection of an account id that is not 1..64 letters, digits or ._@-, or none.
inline std::optional<Applied> BadAccountId(const std::string& id, const char* field) {
  if (ValidateName(id, 64, field).ok()) return std::nullopt;
  return Reject(absl::StatusCode::kInvalidArgument, "INVALID_REQUEST",
                absl::StrCat(field, " must be 1..64 letters, digits or ._@-"));
}

}  // namespace ledger_internal
}  // namespace eonce

#endif  // EONCE_SERVICES_LEDGER_LEDGER_INTERNAL_H_
