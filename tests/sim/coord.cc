#include "tests/sim/coord.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status.h"

namespace eonce::sim::internal {

namespace {
absl::Status Unreachable() {
  return Error(absl::StatusCode::kUnavailable, "STORE_UNREACHABLE",
               "the coordination store cannot be reached");
}
}  // namespace

absl::StatusOr<SlotMap> SimCoord::Read() const {
  if (!map_.has_value()) return absl::NotFoundError("no slot map yet");
  return *map_;
}

absl::StatusOr<SlotMap> SimCoord::CompareAndSwap(uint64_t expected_epoch, const SlotMap& next) {
  if (revision_ != expected_epoch && !cas_ignores_epoch_) {
    return Error(absl::StatusCode::kAborted, "EPOCH_CHANGED",
                 absl::StrCat("the map is at epoch ", revision_, ", not ", expected_epoch));
  }
  v1::SlotMap proto = next.proto();
  proto.set_epoch(++revision_);
  EONCE_ASSIGN_OR_RETURN(SlotMap stored, SlotMap::FromProto(std::move(proto)));
  map_ = stored;
  return stored;
}

void SimCoord::Expire() {
  const int64_t now = truth_.NowMs();
  for (auto it = leases_.begin(); it != leases_.end();) {
    it = it->second.expires_at_ms <= now ? leases_.erase(it) : std::next(it);
  }
}

ShardPresence SimCoord::Presence(const std::string& shard) {
  Expire();
  ShardPresence presence;
  for (const auto& [id, lease] : leases_) {
    if (lease.shard != shard) continue;
    presence.live = true;
    presence.held_epoch = lease.held_epoch;
    presence.address = lease.address;
  }
  return presence;
}

absl::StatusOr<int64_t> SimCoord::Acquire(const std::string& shard, const std::string& address) {
  Expire();
  for (const auto& [id, lease] : leases_) {
    if (lease.shard == shard) {
      return Error(absl::StatusCode::kFailedPrecondition, "SHARD_HELD",
                   absl::StrCat("shard ", shard, " is held by lease ", id));
    }
  }
  const int64_t id = next_lease_++;
  leases_[id] = Lease{shard, address, truth_.NowMs() + kLeaseTtlMs, 0};
  return id;
}

absl::Status SimCoord::KeepAlive(int64_t lease) {
  Expire();
  auto it = leases_.find(lease);
  if (it == leases_.end()) return absl::NotFoundError("lease expired");
  // The store counts the TTL from when it receives the keepalive.
  it->second.expires_at_ms = truth_.NowMs() + kLeaseTtlMs;
  return absl::OkStatus();
}

absl::Status SimCoord::Acknowledge(int64_t lease, uint64_t epoch) {
  Expire();
  auto it = leases_.find(lease);
  if (it == leases_.end()) return absl::NotFoundError("lease expired");
  it->second.held_epoch = std::max(it->second.held_epoch, epoch);
  return absl::OkStatus();
}

void SimCoord::Revoke(int64_t lease) { leases_.erase(lease); }

int64_t SimCoord::ExpiresAtMs(int64_t lease) {
  Expire();
  auto it = leases_.find(lease);
  return it == leases_.end() ? 0 : it->second.expires_at_ms;
}

absl::StatusOr<SlotMap> SimMapStore::Read() {
  if (!reachable_()) return Unreachable();
  return coord_.Read();
}

absl::StatusOr<SlotMap> SimMapStore::CompareAndSwap(uint64_t expected_epoch, const SlotMap& next) {
  if (!reachable_()) return Unreachable();
  return coord_.CompareAndSwap(expected_epoch, next);
}

absl::StatusOr<SlotMap> SimMapStore::WaitNewer(uint64_t after_epoch, int64_t /*timeout_ms*/) {
  if (!reachable_()) return Unreachable();
  EONCE_ASSIGN_OR_RETURN(SlotMap map, coord_.Read());
  if (map.epoch() <= after_epoch) return absl::DeadlineExceededError("no newer map");
  return map;
}

absl::StatusOr<ShardPresence> SimMapStore::Presence(const std::string& shard) {
  if (!reachable_()) return Unreachable();
  return coord_.Presence(shard);
}

void SimShardLease::Answered(int64_t sent_ms) {
  last_sent_ms_ = sent_ms;
  serve_until_ms_ = sent_ms + static_cast<int64_t>(kLeaseTtlMs * (1 - kLeaseDriftAllowance)) -
                    kLeaseMarginMs;
}

absl::Status SimShardLease::Acquire(const std::string& shard, const std::string& address) {
  const int64_t sent = clock_.NowMs();
  if (!reachable_()) return Unreachable();
  EONCE_ASSIGN_OR_RETURN(lease_, coord_.Acquire(shard, address));
  Answered(sent);
  return absl::OkStatus();
}

absl::Status SimShardLease::Renew() {
  if (lease_ == 0) return absl::FailedPreconditionError("no lease");
  const int64_t sent = clock_.NowMs();
  if (!reachable_()) return Unreachable();
  absl::Status renewed = coord_.KeepAlive(lease_);
  if (!renewed.ok()) {
    lease_ = 0;
    serve_until_ms_ = 0;
    return renewed;
  }
  Answered(sent);
  return absl::OkStatus();
}

absl::Status SimShardLease::Acknowledge(uint64_t epoch) {
  if (lease_ == 0) return absl::FailedPreconditionError("no lease");
  if (!reachable_()) return Unreachable();
  return coord_.Acknowledge(lease_, epoch);
}

void SimShardLease::Release() {
  if (lease_ != 0 && reachable_()) coord_.Revoke(lease_);
  lease_ = 0;
  serve_until_ms_ = 0;
}

}  // namespace eonce::sim::internal
