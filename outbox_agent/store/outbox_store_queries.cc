// OutboxStore's queries: what is due, listing by state in enqueue order, the counts and
// the age of the oldest waiting record. They read the indexes and change nothing.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/status.h"
#include "outbox_agent/store/outbox_layout.h"
#include "outbox_agent/store/outbox_store.h"

namespace eonce {

using outbox_layout::kStatesCf;
using outbox_layout::StateKey;
using outbox_layout::Waiting;

absl::StatusOr<std::vector<std::string>> OutboxStore::Due(int64_t now_ms, int limit) {
  return due_.DueBy(now_ms, limit);
}

std::optional<int64_t> OutboxStore::NextDueMs() { return due_.Earliest(); }

void OutboxStore::PostponeDue(const std::string& command_id, int64_t not_before_ms) {
  due_.Postpone(command_id, not_before_ms);
}

size_t OutboxStore::ListLimit(int limit) {
  return static_cast<size_t>(std::clamp(limit <= 0 ? 100 : limit, 1, 1000));
}

absl::StatusOr<std::vector<OutboxRecord>> OutboxStore::List(OutboxState state,
                                                           const std::string& after,
                                                           int limit) {
  limit = static_cast<int>(ListLimit(limit));
  std::vector<OutboxRecord> out;
  std::vector<OutboxState> states;
  if (state == v1::OUTBOX_STATE_UNSPECIFIED) {
    for (int s = 1; s < v1::OutboxState_ARRAYSIZE; ++s) states.push_back(static_cast<OutboxState>(s));
  } else {
    states.push_back(state);
  }
  // Pages follow the states index: by state, then in enqueue order. A page resumes at
  // the record it ended on, so states before that record's state are done.
  std::string after_key;
  if (!after.empty()) {
    EONCE_ASSIGN_OR_RETURN(auto anchor, GetState(after));
    if (!anchor.has_value()) {
      return Error(absl::StatusCode::kFailedPrecondition, "LIST_ANCHOR_GONE",
                   absl::StrCat("after_command_id ", after,
                                " is no longer in the outbox; list again from the start"));
    }
    after_key = StateKey(anchor->state(), *anchor);
  }
  std::unique_ptr<rocksdb::Iterator> it = store_.NewIterator(kStatesCf);
  for (OutboxState s : states) {
    std::string prefix(1, static_cast<char>(s));
    if (!after_key.empty() &&
        static_cast<unsigned char>(prefix[0]) < static_cast<unsigned char>(after_key[0])) {
      continue;
    }
    it->Seek(after_key.empty() || after_key[0] != prefix[0] ? prefix : after_key);
    for (; it->Valid() && it->key().starts_with(prefix) && static_cast<int>(out.size()) < limit;
         it->Next()) {
      if (it->key().ToString() == after_key) continue;
      EONCE_ASSIGN_OR_RETURN(auto record, Get(it->key().ToString().substr(9)));
      if (record.has_value()) out.push_back(std::move(*record));
    }
    if (static_cast<int>(out.size()) >= limit) break;
  }
  EONCE_RETURN_IF_ERROR(FromRocks(it->status(), "list outbox"));
  return out;
}

std::array<int64_t, v1::OutboxState_ARRAYSIZE> OutboxStore::CountsByState() const {
  std::array<int64_t, v1::OutboxState_ARRAYSIZE> out{};
  for (int s = 0; s < v1::OutboxState_ARRAYSIZE; ++s) out[s] = counts_[s].load();
  return out;
}

absl::StatusOr<int64_t> OutboxStore::OldestWaitingAgeMs() {
  int64_t oldest = 0;
  std::unique_ptr<rocksdb::Iterator> it = store_.NewIterator(kStatesCf);
  for (int s = 1; s < v1::OutboxState_ARRAYSIZE; ++s) {
    if (!Waiting(static_cast<OutboxState>(s))) continue;
    std::string prefix(1, static_cast<char>(s));
    it->Seek(prefix);
    if (!it->Valid() || !it->key().starts_with(prefix)) continue;
    EONCE_ASSIGN_OR_RETURN(auto record, GetState(it->key().ToString().substr(9)));
    if (record.has_value()) {
      oldest = std::max(oldest, clock_.NowMs() - record->created_at_ms());
    }
  }
  EONCE_RETURN_IF_ERROR(FromRocks(it->status(), "oldest waiting"));
  return oldest;
}

}  // namespace eonce
