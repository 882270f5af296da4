#include "dedupe_sidecar/sharding/shard_coordinator.h"

#include <algorithm>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/base/log.h"
#include "common/base/status.h"

namespace eonce {

absl::Status ShardCoordinator::RenewIfDue() {
  if (clock_.NowMs() - renewed_at_ms_ < o_.lease_ttl_ms / 3) return absl::OkStatus();
  const int64_t now = clock_.NowMs();
  absl::Status renewed = lease_.Renew();
  if (renewed.ok()) renewed_at_ms_ = now;  // else asked again on the next turn
  if (renewed.ok() || renewed.code() == absl::StatusCode::kUnavailable ||
      renewed.code() == absl::StatusCode::kDeadlineExceeded) {
    // Unanswered: the lease may be alive still; ServeUntilMs did not grow, so the gate
    // stops on time by itself if it is not.
    return renewed;
  }
  // Answered that the lease is gone: another process may take the shard now.
  leased_ = false;
  acked_ = 0;
  acked_map_.reset();
  gate_.SetServeUntilMs(0);
  {
    absl::MutexLock lock(&serving_mu_);
    serving_epoch_ = 0;
  }
  LogWarn("shard lease lost; the gate is closed until it is taken again",
          {{"shard", o_.shard}, {"error", std::string(renewed.message())}});
  return renewed;
}

absl::Status ShardCoordinator::Step(int64_t wait_ms) {
  if (!leased_) {
    gate_.SetServeUntilMs(0);
    EONCE_RETURN_IF_ERROR(lease_.Acquire(o_.shard, o_.address));
    leased_ = true;
    acked_ = 0;
    renewed_at_ms_ = clock_.NowMs();
    LogInfo("shard lease taken", {{"shard", o_.shard}, {"address", o_.address}});
  }
  EONCE_RETURN_IF_ERROR(RenewIfDue());
  if (!leased_) return absl::OkStatus();

  absl::Status followed = FollowTheMap(wait_ms);
  HoldBusinessSlotsIfDue();
  // Serving needs a lease this process holds and, under it, a map read and acknowledged.
  if (acked_ != 0) gate_.SetServeUntilMs(lease_.ServeUntilMs());
  absl::MutexLock lock(&serving_mu_);
  serving_epoch_ = acked_;
  return followed;
}

absl::Status ShardCoordinator::FollowTheMap(int64_t wait_ms) {
  // A fresh lease reads the map (the one held may be the store's already); afterwards only
  // newer maps come.
  std::unique_ptr<SlotMap> next;
  if (acked_ == 0) {
    absl::StatusOr<SlotMap> read = store_.Read();
    if (!read.ok()) return read.status();
    next = std::make_unique<SlotMap>(std::move(*read));
  } else {
    const int64_t until_renewal = o_.lease_ttl_ms / 3 - (clock_.NowMs() - renewed_at_ms_);
    const int64_t wait = std::max<int64_t>(0, std::min({wait_ms, o_.max_wait_ms, until_renewal}));
    absl::StatusOr<SlotMap> newer = store_.WaitNewer(gate_.epoch(), wait);
    if (newer.ok()) {
      next = std::make_unique<SlotMap>(std::move(*newer));
    } else if (newer.status().code() != absl::StatusCode::kDeadlineExceeded) {
      return newer.status();
    }
  }
  // A mover may have pushed a newer map than the store gave this turn: adopting that one
  // again waits until it is drained, and it is what gets acknowledged.
  if (gate_.epoch() > acked_ && (next == nullptr || next->epoch() < gate_.epoch())) {
    next = std::make_unique<SlotMap>(*gate_.map());
  }
  if (next != nullptr) {
    absl::StatusOr<uint64_t> held = gate_.Adopt(*next, o_.drain_timeout_ms);
    if (!held.ok()) return held.status();  // DRAINING_SLOTS: the next turn waits again
    if (*held == next->epoch()) {
      EONCE_RETURN_IF_ERROR(lease_.Acknowledge(*held));
      acked_ = *held;
      acked_map_ = std::make_shared<const SlotMap>(*next);
    }
  }
  return absl::OkStatus();
}

void ShardCoordinator::HoldBusinessSlotsIfDue() {
  if (business_ == nullptr || acked_map_ == nullptr) return;
  if (acked_map_->epoch() <= business_held_) return;
  // Only a map adopted, drained and acknowledged: from then on this shard alone writes the
  // slots it gives it, so the business's copy of them is the slots' own.
  absl::Status held = HoldBusinessSlots(*acked_map_, o_.shard, *business_,
                                        clock_.NowMs() + o_.business_hold_timeout_ms);
  if (held.ok()) {
    business_held_ = acked_map_->epoch();
    hold_error_.clear();
    return;
  }
  if (std::string(held.message()) != hold_error_) {
    hold_error_ = std::string(held.message());
    LogWarn("the business was not told the slots this shard holds; will retry",
            {{"shard", o_.shard},
             {"epoch", absl::StrCat(acked_map_->epoch())},
             {"error", hold_error_}});
  }
}

bool ShardCoordinator::AwaitServing(uint64_t epoch, absl::Duration limit) {
  absl::MutexLock lock(&serving_mu_);
  auto serving = [this, epoch]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(serving_mu_) {
    return serving_epoch_ != 0 && serving_epoch_ >= epoch;
  };
  return serving_mu_.AwaitWithTimeout(absl::Condition(&serving), limit);
}

void ShardCoordinator::Start() {
  thread_ = std::thread([this] {
    int64_t backoff = o_.retry_ms;
    std::string last_error;
    while (!stop_.HasBeenNotified()) {
      absl::Status step = Step(o_.max_wait_ms);
      if (step.ok()) {
        backoff = o_.retry_ms;
        last_error.clear();
        continue;
      }
      if (std::string(step.message()) != last_error) {
        last_error = std::string(step.message());
        LogWarn("shard coordination: will retry", {{"shard", o_.shard}, {"error", last_error}});
      }
      stop_.WaitForNotificationWithTimeout(absl::Milliseconds(backoff));
      backoff = std::min(backoff * 2, o_.retry_max_ms);
    }
  });
}

void ShardCoordinator::Stop() {
  if (stopped_) return;
  stopped_ = true;
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (thread_.joinable()) thread_.join();
  gate_.SetServeUntilMs(0);
  if (leased_) lease_.Release();
  leased_ = false;
}

}  // namespace eonce
