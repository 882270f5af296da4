// Column family names and key layouts shared by the inbox's source files; not an API.
#ifndef EONCE_SERVICES_INBOX_INBOX_INTERNAL_H_
#define EONCE_SERVICES_INBOX_INBOX_INTERNAL_H_

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/big_endian.h"
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

// An effect's key in kEffectsCf: its sequence number, big-endian.
inline std::string SeqKey(uint64_t seq) { return BigEndian64(seq); }
inline uint64_t SeqOfKey(const rocksdb::Slice& key) {
  return ReadBigEndian64(absl::string_view(key.data(), key.size()));
}

}  // namespace inbox_internal
}  // namespace eonce

#endif  // EONCE_SERVICES_INBOX_INBOX_INTERNAL_H_
