// The outbox store's layout on disk: its column families and the keys of its index
// entries (outbox_store.h describes them). Internal to the OutboxStore's sources.
#ifndef EONCE_OUTBOX_AGENT_STORE_OUTBOX_LAYOUT_H_
#define EONCE_OUTBOX_AGENT_STORE_OUTBOX_LAYOUT_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/base/big_endian.h"
#include "outbox_agent/store/outbox_store.h"

namespace eonce::outbox_layout {

inline constexpr char kRecordsCf[] = "records";
inline constexpr char kDueCf[] = "due";
inline constexpr char kStatesCf[] = "states";
inline constexpr char kLanesCf[] = "lanes";
inline constexpr char kMetaCf[] = "meta";
inline constexpr char kPayloadsCf[] = "payloads";

// A payload longer than this is kept apart from its record while the record may be sent
// (the payloads column family), so that each transition rewrites only the record's state.
// A shorter one stays in the record: rewriting it costs less than a second key to insert
// at Enqueue, read at each claim and delete when the record is final.
inline constexpr size_t kInlinePayloadBytes = 512;
inline constexpr char kCredentialKey[] = "credential";

inline std::string LaneKey(const OutboxRecord& record) {
  return absl::StrCat(LaneOf(record), std::string(1, '\0'), BigEndian64(record.enqueue_seq()));
}

inline std::string StateKey(OutboxState state, const OutboxRecord& record) {
  return absl::StrCat(std::string(1, static_cast<char>(state)), BigEndian64(record.enqueue_seq()),
                      record.command().command_id());
}

// When a record in `state` is due, if it is: waiting records at their next attempt,
// claimed ones when their claim runs out (so a dead worker's record is taken over).
inline std::optional<int64_t> DueAt(const OutboxRecord& record) {
  switch (record.state()) {
    case v1::QUEUED:
    case v1::RETRYABLE_FAILED:
    case v1::UNKNOWN:
      return record.next_attempt_at_ms();
    case v1::CLAIMED:
    case v1::SENDING:
      return record.claim().expires_at_ms();
    default:
      return std::nullopt;
  }
}

inline bool Waiting(OutboxState state) {
  return state == v1::QUEUED || state == v1::RETRYABLE_FAILED || state == v1::UNKNOWN ||
         state == v1::CLAIMED || state == v1::SENDING;
}

}  // namespace eonce::outbox_layout

#endif  // EONCE_OUTBOX_AGENT_STORE_OUTBOX_LAYOUT_H_
