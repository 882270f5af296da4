// Column family names and key layouts shared by the inbox's source files; not an API.
#ifndef EONCE_SERVICES_INBOX_INBOX_INTERNAL_H_
#define EONCE_SERVICES_INBOX_INBOX_INTERNAL_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/base/big_endian.h"
#include "rocksdb/slice.h"

namespace eonce {
namespace inbox_internal {

inline constexpr char kInboxCf[] = "inbox";
inline constexpr char kEffectsCf[] = "effects";
inline constexpr char kInboxKeysCf[] = "inbox_keys";
// tenant \0 effect seq (8 bytes) index (2 bytes) -> eonce.v1.Command.
inline constexpr char kFollowUpsCf[] = "follow_ups";
// slot (2 bytes) column family \0 key -> "" (a business row, kept) or an empty framed
// value (an inbox row, expiring with it).
inline constexpr char kSlotIndexCf[] = "slot_index";

// Which effects and follow-ups a slot import wrote, so that the same row imported again
// (a retried page) is not written twice: column family \0 SHA-256 of the row as exported
// -> the key it was written under. Filed under the slot; never exported.
inline constexpr char kSlotImportsCf[] = "slot_imports";

// (tenant, command id) in the inbox; (tenant, idempotency key) in inbox_keys.
inline std::string InboxKey(const std::string& tenant, const std::string& id) {
  return absl::StrCat(tenant, std::string(1, '\0'), id);
}

// What the Run on this thread claims of the slot it writes (RunLocked sets it around the
// business's apply function, which runs on the calling thread): PutEntityRow refuses a row
// of another slot, or, for a call that claims none, a row of a fenced slot, and says why
// here; RunLocked then fails the whole call with nothing written. A thread-local, so that
// a business need not hand the call's identity to every row it writes.
struct RowClaim {
  bool sharded = false;  // the call carries a slot epoch
  uint32_t slot = 0;     // ... for this slot
  std::string refused;   // empty: every row so far is the claim's
  bool fenced = false;   // refused because the slot is fenced (else: another slot)
};
RowClaim*& CurrentRowClaim();

// A follow-up's key: tenant \0 parent's effect seq (8 bytes) index (2 bytes), then the
// slot the parent's call was filed under (2 bytes) when it was (keys of before have none).
inline std::string FollowUpKeyPrefix(const std::string& tenant) {
  return absl::StrCat(tenant, std::string(1, '\0'));
}
inline std::string FollowUpKey(const std::string& tenant, uint64_t seq, uint32_t index,
                               std::optional<uint32_t> slot) {
  std::string key = FollowUpKeyPrefix(tenant);
  AppendBigEndian(&key, seq, 8);
  AppendBigEndian(&key, index, 2);
  if (slot.has_value()) AppendBigEndian(&key, *slot, 2);
  return key;
}
// The parts of a follow-up's key after the tenant; false if it is not one.
struct FollowUpKeyParts {
  std::string tenant;
  uint32_t index = 0;
  std::optional<uint32_t> slot;
};
inline bool ParseFollowUpKey(absl::string_view key, FollowUpKeyParts* parts) {
  const size_t nul = key.find('\0');
  if (nul == absl::string_view::npos) return false;
  absl::string_view rest = key.substr(nul + 1);
  if (rest.size() != 10 && rest.size() != 12) return false;
  parts->tenant = std::string(key.substr(0, nul));
  parts->index = static_cast<uint32_t>(ReadBigEndian64(rest.substr(8, 2)));
  if (rest.size() == 12) parts->slot = static_cast<uint32_t>(ReadBigEndian64(rest.substr(10, 2)));
  return true;
}

// An effect's key in kEffectsCf: its sequence number, big-endian.
inline std::string SeqKey(uint64_t seq) { return BigEndian64(seq); }
inline uint64_t SeqOfKey(const rocksdb::Slice& key) {
  return ReadBigEndian64(absl::string_view(key.data(), key.size()));
}

}  // namespace inbox_internal
}  // namespace eonce

#endif  // EONCE_SERVICES_INBOX_INBOX_INTERNAL_H_
