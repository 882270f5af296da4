#include "dedupe_sidecar/finished_answers.h"

#include <functional>
#include <utility>

namespace eonce {

FinishedAnswers::FinishedAnswers(size_t max_bytes) : max_bytes_per_shard_(max_bytes / kShards) {
  if (max_bytes_per_shard_ == 0) return;
  for (Shard& shard : shards_) {
    absl::MutexLock lock(&shard.mu);
    shard.missed.assign(kMissesNoted, 0);
  }
}

size_t FinishedAnswers::HashOf(const std::string& scoped_key) {
  return std::hash<std::string>()(scoped_key);
}

int FinishedAnswers::ShardIndexOf(const std::string& scoped_key) {
  return static_cast<int>(HashOf(scoped_key) % kShards);
}

void FinishedAnswers::EraseLocked(Shard& shard, Lru::iterator it) {
  shard.bytes -= it->cost;
  shard.index.erase(it->scoped_key);
  shard.lru.erase(it);
}

void FinishedAnswers::EraseKeyLocked(Shard& shard, const std::string& scoped_key) {
  if (auto found = shard.index.find(scoped_key); found != shard.index.end()) {
    EraseLocked(shard, found->second);
  }
}

void FinishedAnswers::InsertLocked(Shard& shard, const std::string& scoped_key, Entry entry) {
  const size_t cost = scoped_key.size() + entry.record.ByteSizeLong() + kEntryOverheadBytes;
  if (cost > max_bytes_per_shard_) return;
  shard.lru.push_front(Node{scoped_key, std::move(entry), cost});
  shard.index.emplace(scoped_key, shard.lru.begin());
  shard.bytes += cost;
  while (shard.bytes > max_bytes_per_shard_) EraseLocked(shard, std::prev(shard.lru.end()));
}

bool FinishedAnswers::Get(const std::string& scoped_key, Entry* out, Ticket* ticket) {
  if (max_bytes_per_shard_ == 0) return false;
  const size_t hash = HashOf(scoped_key);
  Shard& shard = ShardOf(hash);
  {
    absl::MutexLock lock(&shard.mu);
    auto found = shard.index.find(scoped_key);
    if (found != shard.index.end()) {
      shard.lru.splice(shard.lru.begin(), shard.lru, found->second);
      *out = found->second->entry;
      hits_.fetch_add(1, std::memory_order_relaxed);
      return true;
    }
    if (ticket != nullptr) {
      ticket->generation = shard.generation;
      uint64_t& noted = shard.missed[(hash / kShards) % kMissesNoted];
      const uint64_t fingerprint = static_cast<uint64_t>(hash) | 1;  // never 0, the empty
      ticket->admitted = noted == fingerprint;
      noted = ticket->admitted ? 0 : fingerprint;
    }
  }
  misses_.fetch_add(1, std::memory_order_relaxed);
  return false;
}

void FinishedAnswers::Fill(const std::string& scoped_key, Entry entry, const Ticket& ticket) {
  if (max_bytes_per_shard_ == 0 || !ticket.admitted) return;
  Shard& shard = ShardOf(HashOf(scoped_key));
  absl::MutexLock lock(&shard.mu);
  if (shard.generation != ticket.generation || shard.writing > 0) return;
  if (shard.index.contains(scoped_key)) return;
  InsertLocked(shard, scoped_key, std::move(entry));
}

void FinishedAnswers::BeginWrite(const std::string& scoped_key) {
  if (max_bytes_per_shard_ == 0) return;
  Shard& shard = ShardOf(HashOf(scoped_key));
  absl::MutexLock lock(&shard.mu);
  ++shard.generation;
  ++shard.writing;
  EraseKeyLocked(shard, scoped_key);
}

void FinishedAnswers::EndWrite(const std::string& scoped_key, Entry* finished) {
  if (max_bytes_per_shard_ == 0) return;
  Shard& shard = ShardOf(HashOf(scoped_key));
  absl::MutexLock lock(&shard.mu);
  ++shard.generation;
  --shard.writing;
  EraseKeyLocked(shard, scoped_key);
  if (finished != nullptr) InsertLocked(shard, scoped_key, std::move(*finished));
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
