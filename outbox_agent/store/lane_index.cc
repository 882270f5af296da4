#include "outbox_agent/store/lane_index.h"

namespace eonce {

void LaneIndex::Add(const std::string& lane, uint64_t seq, const std::string& command_id) {
  absl::MutexLock lock(&mu_);
  lanes_[lane][seq] = command_id;
  lane_of_[command_id] = lane;
}

void LaneIndex::Remove(const std::string& lane, uint64_t seq) {
  absl::MutexLock lock(&mu_);
  auto it = lanes_.find(lane);
  if (it == lanes_.end()) return;
  auto entry = it->second.find(seq);
  if (entry == it->second.end()) return;
  lane_of_.erase(entry->second);
  it->second.erase(entry);
  if (it->second.empty()) lanes_.erase(it);
}

std::optional<std::string> LaneIndex::FirstOther(const std::string& lane,
                                                 uint64_t own_seq) const {
  absl::MutexLock lock(&mu_);
  auto it = lanes_.find(lane);
  if (it == lanes_.end()) return std::nullopt;
  for (const auto& [seq, id] : it->second) {
    if (seq != own_seq) return id;
  }
  return std::nullopt;
}

bool LaneIndex::IsHead(const std::string& lane, uint64_t own_seq) const {
  absl::MutexLock lock(&mu_);
  auto it = lanes_.find(lane);
  if (it == lanes_.end() || it->second.empty()) return true;
  return it->second.begin()->first >= own_seq;
}

std::optional<std::string> LaneIndex::LaneOf(const std::string& command_id) const {
  absl::MutexLock lock(&mu_);
  auto it = lane_of_.find(command_id);
  if (it == lane_of_.end()) return std::nullopt;
  return it->second;
}

size_t LaneIndex::size() const {
  absl::MutexLock lock(&mu_);
  return lane_of_.size();
}

}  // namespace eonce
