#include "dedupe_sidecar/finished_answers.h"

#include <functional>
#include <utility>

namespace eonce {

FinishedAnswers::FinishedAnswers(size_t max_bytes) : max_bytes_per_shard_(max_bytes / kShards) {}

int FinishedAnswers::ShardIndexOf(const std::string& scoped_key) {
  return static_cast<int>(std::hash<std::string>()(scoped_key) % kShards);
}

void FinishedAnswers::EraseLocked(Shard& shard, Lru::iterator it) {
  shard.bytes -= it->cost;
  shard.index.erase(it->scoped_key);
  shard.lru.erase(it);
}

bool FinishedAnswers::Get(const std::string& scoped_key, Entry* out) {
  if (max_bytes_per_shard_ == 0) return false;
  Shard& shard = shards_[ShardIndexOf(scoped_key)];
  {
    absl::MutexLock lock(&shard.mu);
    auto found = shard.index.find(scoped_key);
    if (found != shard.index.end()) {
      shard.lru.splice(shard.lru.begin(), shard.lru, found->second);
      *out = found->second->entry;
      hits_.fetch_add(1, std::memory_order_relaxed);
      return true;
    }
  }
  misses_.fetch_add(1, std::memory_order_relaxed);
  return false;
}

void FinishedAnswers::Put(const std::string& scoped_key, Entry entry) {
  Shard& shard = shards_[ShardIndexOf(scoped_key)];
  const size_t cost = scoped_key.size() + entry.record.ByteSizeLong() + kEntryOverheadBytes;
  absl::MutexLock lock(&shard.mu);
  if (auto found = shard.index.find(scoped_key); found != shard.index.end()) {
    EraseLocked(shard, found->second);
  }
  if (cost > max_bytes_per_shard_) return;
  shard.lru.push_front(Node{scoped_key, std::move(entry), cost});
  shard.index.emplace(scoped_key, shard.lru.begin());
  shard.bytes += cost;
  while (shard.bytes > max_bytes_per_shard_) EraseLocked(shard, std::prev(shard.lru.end()));
}

void FinishedAnswers::Erase(const std::string& scoped_key) {
  if (max_bytes_per_shard_ == 0) return;
  Shard& shard = shards_[ShardIndexOf(scoped_key)];
  absl::MutexLock lock(&shard.mu);
  if (auto found = shard.index.find(scoped_key); found != shard.index.end()) {
    EraseLocked(shard, found->second);
  }
}

size_t FinishedAnswers::bytes() const {
  size_t total = 0;
  for (const Shard& shard : shards_) {
    absl::MutexLock lock(&shard.mu);
    total += shard.bytes;
  }
  return total;
}

size_t FinishedAnswers::entries() const {
  size_t total = 0;
  for (const Shard& shard : shards_) {
    absl::MutexLock lock(&shard.mu);
    total += shard.index.size();
  }
  return total;
}

}  // namespace eonce
