#include "dedupe_sidecar/store/finished_answers.h"

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
  shard.index.erase(absl::string_view(it->scoped_key));
  shard.lru.erase(it);
}

void FinishedAnswers::EraseKeyLocked(Shard& shard, const std::string& scoped_key) {
  if (auto found = shard.index.find(absl::string_view(scoped_key)); found != shard.index.end()) {
    EraseLocked(shard, found->second);
  }
}

void FinishedAnswers::InsertLocked(Shard& shard, const std::string& scoped_key, Stored stored) {
  const size_t cost = scoped_key.size() + stored.record.size() + kEntryOverheadBytes;
  if (cost > max_bytes_per_shard_) return;
  shard.lru.push_front(Node{scoped_key, std::move(stored), cost});
  shard.index.emplace(absl::string_view(shard.lru.front().scoped_key), shard.lru.begin());
  shard.bytes += cost;
  while (shard.bytes > max_bytes_per_shard_) EraseLocked(shard, std::prev(shard.lru.end()));
}

bool FinishedAnswers::NoteMissLocked(Shard& shard, size_t hash) {
  uint64_t* set = &shard.missed[((hash / kShards) % (kMissesNoted / kNoteWays)) * kNoteWays];
  const uint64_t fingerprint = static_cast<uint64_t>(hash) | 1;  // never 0, the empty
  uint64_t* empty = nullptr;
  for (size_t way = 0; way < kNoteWays; ++way) {
    if (set[way] == fingerprint) {
      set[way] = 0;
      return true;
    }
    if (set[way] == 0 && empty == nullptr) empty = &set[way];
  }
  // No empty place: one picked by the count of notes mixed with the key's own bits, so
  // that more keys retried in turn than a set holds still find theirs most of the time.
  const uint64_t mixed = (shard.notes++ * 0x9E3779B97F4A7C15ull) ^ (fingerprint >> 33);
  *(empty != nullptr ? empty : &set[mixed % kNoteWays]) = fingerprint;
  return false;
}

bool FinishedAnswers::Get(const std::string& scoped_key, Entry* out, Ticket* ticket) {
  if (max_bytes_per_shard_ == 0) return false;
  const size_t hash = HashOf(scoped_key);
  Shard& shard = ShardOf(hash);
  Stored found_copy;
  {
    absl::MutexLock lock(&shard.mu);
    auto found = shard.index.find(absl::string_view(scoped_key));
    if (found == shard.index.end()) {
      if (ticket != nullptr) {
        ticket->generation = shard.generation;
        ticket->admitted = NoteMissLocked(shard, hash);
      }
      misses_.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    shard.lru.splice(shard.lru.begin(), shard.lru, found->second);
    found_copy = found->second->stored;
  }
  // The bytes of a stored copy, so they parse; were they not to, the caller reads the store
  // (with no fill).
  if (!out->record.ParseFromString(found_copy.record)) {
    if (ticket != nullptr) *ticket = Ticket{};
    misses_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  out->drop_at_ms = found_copy.drop_at_ms;
  out->trim_at_ms = found_copy.trim_at_ms;
  hits_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void FinishedAnswers::Fill(const std::string& scoped_key, Stored stored, const Ticket& ticket) {
  if (max_bytes_per_shard_ == 0 || !ticket.admitted) return;
  Shard& shard = ShardOf(HashOf(scoped_key));
  absl::MutexLock lock(&shard.mu);
  if (shard.generation != ticket.generation || shard.writing > 0) return;
  if (shard.index.contains(absl::string_view(scoped_key))) return;
  InsertLocked(shard, scoped_key, std::move(stored));
}

void FinishedAnswers::BeginWrite(const std::string& scoped_key) {
  if (max_bytes_per_shard_ == 0) return;
  Shard& shard = ShardOf(HashOf(scoped_key));
  absl::MutexLock lock(&shard.mu);
  ++shard.generation;
  ++shard.writing;
  EraseKeyLocked(shard, scoped_key);
}

void FinishedAnswers::EndWrite(const std::string& scoped_key, Stored* finished) {
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
