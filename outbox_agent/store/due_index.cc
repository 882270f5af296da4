#include "outbox_agent/store/due_index.h"

namespace eonce {

void DueIndex::Set(const std::string& command_id, int64_t at_ms) {
  absl::MutexLock lock(&mu_);
  if (auto held = held_.find(command_id); held != held_.end()) {
    held->second = at_ms;
    return;
  }
  SetLocked(command_id, at_ms);
}

void DueIndex::Postpone(const std::string& command_id, int64_t not_before_ms) {
  absl::MutexLock lock(&mu_);
  auto it = at_.find(command_id);
  if (it == at_.end() || it->second >= not_before_ms) return;
  SetLocked(command_id, not_before_ms);
}

void DueIndex::SetLocked(const std::string& command_id, int64_t at_ms) {
  auto [it, inserted] = at_.try_emplace(command_id, at_ms);
  if (!inserted) {
    by_time_.erase({it->second, command_id});
    it->second = at_ms;
  }
  by_time_.emplace(at_ms, command_id);
}

void DueIndex::Remove(const std::string& command_id) {
  absl::MutexLock lock(&mu_);
  if (auto held = held_.find(command_id); held != held_.end()) held->second.reset();
  RemoveLocked(command_id);
}

void DueIndex::Hold(const std::string& command_id) {
  absl::MutexLock lock(&mu_);
  std::optional<int64_t> at;
  if (auto it = at_.find(command_id); it != at_.end()) at = it->second;
  RemoveLocked(command_id);
  held_[command_id] = at;
}

void DueIndex::Release(const std::string& command_id) {
  absl::MutexLock lock(&mu_);
  auto held = held_.find(command_id);
  if (held == held_.end()) return;
  const std::optional<int64_t> at = held->second;
  held_.erase(held);
  if (at.has_value()) SetLocked(command_id, *at);
}

void DueIndex::RemoveLocked(const std::string& command_id) {
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
