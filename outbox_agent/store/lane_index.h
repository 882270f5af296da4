// LaneIndex: the outbox's lanes in memory, so that "is this record the head of its
// entity's lane?" and "which record comes next?" are answered without a RocksDB
// iterator (which on the `lanes` column family steps over the deletion markers that
// every finished command leaves).
//
// The `lanes` column family stays the durable truth: the index is rebuilt from it when
// the store opens, and changed only after the batch that changes the column family was
// written, by the writer that holds the lane's lock. So a reader that holds the lane's
// lock sees exactly what the column family holds for that lane.
//
// Bounded by the records that hold a lane entry: those still waiting and those that
// await an operator (the outbox's pending limit bounds the first). Thread-safe.
#ifndef EONCE_OUTBOX_AGENT_STORE_LANE_INDEX_H_
#define EONCE_OUTBOX_AGENT_STORE_LANE_INDEX_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

namespace eonce {

class LaneIndex {
 public:
  // Adds `command_id` at position `seq` (its enqueue sequence number) of `lane`.
  void Add(const std::string& lane, uint64_t seq, const std::string& command_id);
  // Removes the entry at `seq` of `lane`, if there is one.
  void Remove(const std::string& lane, uint64_t seq);

  // The first command of `lane` other than the one at `own_seq`.
  std::optional<std::string> FirstOther(const std::string& lane, uint64_t own_seq) const;
  // True when no other command of `lane` comes before `own_seq`.
  bool IsHead(const std::string& lane, uint64_t own_seq) const;
  // The lane of a command that holds an entry; nullopt for one that holds none.
  std::optional<std::string> LaneOf(const std::string& command_id) const;

  size_t size() const;

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::map<uint64_t, std::string>> lanes_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::string> lane_of_ ABSL_GUARDED_BY(mu_);
};

}  // namespace eonce

#endif  // EONCE_OUTBOX_AGENT_STORE_LANE_INDEX_H_
