// Column family names and key layouts shared by the inbox's source files; not an API.
#ifndef EONCE_SERVICES_INBOX_INBOX_INTERNAL_H_
#define EONCE_SERVICES_INBOX_INBOX_INTERNAL_H_

#include <string>

#include "absl/strings/str_cat.h"

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

}  // namespace inbox_internal
}  // namespace eonce

#endif  // EONCE_SERVICES_INBOX_INBOX_INTERNAL_H_
