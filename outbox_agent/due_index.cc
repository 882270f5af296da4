#include "outbox_agent/due_index.h"

namespace eonce {

void DueIndex::Set(const std::string& command_id, int64_t at_ms) {
  absl::MutexLock lock(&mu_);
  auto [it, inserted] = at_.try_emplace(command_id, at_ms);
  if (!inserted) {
    by_time_.erase({it->second, command_id});
    it->second = at_ms;
  }
  by_time_.emplace(at_ms, command_id);
}

void DueIndex::Remove(const std::string& command_id) {
  absl::MutexLock lock(&mu_);
  auto it = at_.find(command_id);
  if (it == at_.end()) return;
  by_time_.erase({it->second, command_id});
  at_.erase(it);
}

std::vector<std::string> DueIndex::DueBy(int64_t now_ms, int limit) const {
  std::vector<std::string> ids;
  absl::MutexLock lock(&mu_);
  for (auto it = by_time_.begin();
       it != by_time_.end() && it->first <= now_ms && static_cast<int>(ids.size()) < limit;
       ++it) {
    ids.push_back(it->second);
  }
  return ids;
}

std::optional<int64_t> DueIndex::Earliest() const {
  absl::MutexLock lock(&mu_);
  if (by_time_.empty()) return std::nullopt;
  return by_time_.begin()->first;
}

size_t DueIndex::size() const {
  absl::MutexLock lock(&mu_);
  return at_.size();
}

}  // namespace eonce
