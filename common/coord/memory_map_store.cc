#include "common/coord/memory_map_store.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/base/status.h"

namespace eonce {

namespace {

// The protocol's margins (etcd_map_store.h): the store counts the TTL from when a renewal
// arrives, later than it was sent, so the lease outlives this; 1% for clock-rate drift.
int64_t WindowEndMs(int64_t sent_ms, int64_t ttl_ms, int64_t margin_ms) {
  return sent_ms + ttl_ms - ttl_ms / 100 - margin_ms;
}

absl::Status Down() { return Error(absl::StatusCode::kUnavailable, "STORE_DOWN",
                                   "the coordination store cannot be reached"); }

}  // namespace

absl::Status MemoryMapStore::Reachable(const std::string& shard) const {
  if (down_) return Down();
  if (partitioned_.count(shard) > 0) {
    return Error(absl::StatusCode::kUnavailable, "STORE_UNREACHABLE",
                 absl::StrCat("shard ", shard, " cannot reach the coordination store"));
  }
  return absl::OkStatus();
}

const MemoryMapStore::Holder* MemoryMapStore::LiveHolder(const std::string& shard) {
  auto it = holders_.find(shard);
  if (it == holders_.end()) return nullptr;
  if (it->second.expires_ms <= clock_.NowMs()) {
    // Lapsed: etcd deletes the key with the lease, which is a write.
    holders_.erase(it);
    ++revision_;
    return nullptr;
  }
  return &it->second;
}

absl::StatusOr<SlotMap> MemoryMapStore::Read() {
  absl::MutexLock lock(&mu_);
  if (down_) return Down();
  if (!map_.has_value()) return absl::NotFoundError("no slot map in the store yet");
  return *map_;
}

absl::StatusOr<SlotMap> MemoryMapStore::CompareAndSwap(uint64_t expected_epoch,
                                                       const SlotMap& next) {
  absl::MutexLock lock(&mu_);
  if (down_) return Down();
  const uint64_t found = map_.has_value() ? map_->epoch() : 0;
  if (found != expected_epoch) {
    absl::Status changed = Error(absl::StatusCode::kAborted, "EPOCH_CHANGED",
                                 absl::StrCat("the slot map is at epoch ", found, ", not ",
                                              expected_epoch, "; read it again"));
    return WithErrorMetadata(changed, "epoch", absl::StrCat(found));
  }
  v1::SlotMap proto = next.proto();
  proto.set_epoch(++revision_);
  absl::StatusOr<SlotMap> stored = SlotMap::FromProto(std::move(proto));
  if (!stored.ok()) return stored.status();
  map_ = *stored;
  ++map_writes_;
  return stored;
}

absl::StatusOr<SlotMap> MemoryMapStore::WaitNewer(uint64_t after_epoch, int64_t timeout_ms) {
  absl::MutexLock lock(&mu_);
  auto newer = [this, after_epoch]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return down_ || (map_.has_value() && map_->epoch() > after_epoch);
  };
  mu_.AwaitWithTimeout(absl::Condition(&newer), absl::Milliseconds(std::max<int64_t>(0,
                                                                     timeout_ms)));
  if (down_) return Down();
  if (!map_.has_value() || map_->epoch() <= after_epoch) {
    return absl::DeadlineExceededError(
        absl::StrCat("no slot map newer than epoch ", after_epoch, " yet"));
  }
  return *map_;
}

absl::StatusOr<ShardPresence> MemoryMapStore::Presence(const std::string& shard) {
  absl::MutexLock lock(&mu_);
  if (down_) return Down();
  ShardPresence presence;
  if (const Holder* holder = LiveHolder(shard)) {
    presence.live = true;
    presence.held_epoch = holder->held_epoch;
    presence.address = holder->address;
  }
  return presence;
}

void MemoryMapStore::SetPartitioned(const std::string& shard, bool partitioned) {
  absl::MutexLock lock(&mu_);
  if (partitioned) {
    partitioned_.insert(shard);
  } else {
    partitioned_.erase(shard);
  }
}

void MemoryMapStore::SetDown(bool down) {
  absl::MutexLock lock(&mu_);
  down_ = down;
}

int64_t MemoryMapStore::map_writes() const {
  absl::MutexLock lock(&mu_);
  return map_writes_;
}

class MemoryShardLease : public ShardLease {
 public:
  MemoryShardLease(MemoryMapStore& store, MemoryLeaseOptions options)
      : store_(store), options_(options) {}
  ~MemoryShardLease() override { Release(); }

  absl::Status Acquire(const std::string& shard, const std::string& address) override {
    absl::MutexLock lock(&store_.mu_);
    EONCE_RETURN_IF_ERROR(store_.Reachable(shard));
    const int64_t sent = store_.clock_.NowMs();
    const MemoryMapStore::Holder* holder = store_.LiveHolder(shard);
    if (holder != nullptr && holder->lease_id != lease_id_) {
      return Error(absl::StatusCode::kFailedPrecondition, "SHARD_HELD",
                   absl::StrCat("shard ", shard, " is held by another process (at ",
                                holder->address, ") until its lease lapses"));
    }
    if (holder == nullptr) lease_id_ = store_.next_lease_id_++;
    MemoryMapStore::Holder& mine = store_.holders_[shard];
    mine.lease_id = lease_id_;
    mine.expires_ms = sent + options_.ttl_ms;
    mine.address = address;
    if (holder == nullptr) mine.held_epoch = 0;
    ++store_.revision_;
    shard_ = shard;
    serve_until_ms_ = WindowEndMs(sent, options_.ttl_ms, options_.margin_ms);
    return absl::OkStatus();
  }

  absl::Status Renew() override {
    absl::MutexLock lock(&store_.mu_);
    EONCE_ASSIGN_OR_RETURN(MemoryMapStore::Holder * mine, MineLocked());
    const int64_t sent = store_.clock_.NowMs();
    mine->expires_ms = sent + options_.ttl_ms;
    serve_until_ms_ = WindowEndMs(sent, options_.ttl_ms, options_.margin_ms);
    return absl::OkStatus();
  }

  int64_t ServeUntilMs() const override { return serve_until_ms_; }

  absl::Status Acknowledge(uint64_t epoch) override {
    absl::MutexLock lock(&store_.mu_);
    EONCE_ASSIGN_OR_RETURN(MemoryMapStore::Holder * mine, MineLocked());
    mine->held_epoch = epoch;
    ++store_.revision_;
    return absl::OkStatus();
  }

  void Release() override {
    absl::MutexLock lock(&store_.mu_);
    auto it = store_.holders_.find(shard_);
    if (!shard_.empty() && it != store_.holders_.end() && it->second.lease_id == lease_id_) {
      store_.holders_.erase(it);
      ++store_.revision_;
    }
    serve_until_ms_ = 0;
    lease_id_ = 0;
  }

 private:
  absl::StatusOr<MemoryMapStore::Holder*> MineLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(store_.mu_) {
    if (shard_.empty() || lease_id_ == 0) {
      return Error(absl::StatusCode::kFailedPrecondition, "NOT_LEASED", "no lease acquired");
    }
    EONCE_RETURN_IF_ERROR(store_.Reachable(shard_));
    const MemoryMapStore::Holder* live = store_.LiveHolder(shard_);
    if (live == nullptr || live->lease_id != lease_id_) {
      lease_id_ = 0;
      return Error(absl::StatusCode::kFailedPrecondition, "LEASE_LOST",
                   absl::StrCat("the lease on shard ", shard_, " lapsed; acquire it again"));
    }
    return &store_.holders_[shard_];
  }

  MemoryMapStore& store_;
  const MemoryLeaseOptions options_;
  std::string shard_;
  uint64_t lease_id_ = 0;
  int64_t serve_until_ms_ = 0;
};

std::unique_ptr<ShardLease> MemoryMapStore::NewLease(MemoryLeaseOptions options) {
  return std::make_unique<MemoryShardLease>(*this, options);
}

}  // namespace eonce
