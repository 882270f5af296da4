// RocksStore's durability: the group commit (one committer thread, one sync per round
// for every batch queued meanwhile), the quiet store's sync on the caller's thread, and
// the waits for what is already written to become durable. rocks.h says what each
// method promises; this file is how.
#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/callback_batch.h"
#include "common/store/rocks.h"
#include "common/base/status.h"

namespace eonce {

absl::Status RocksStore::AwaitDurable() {
  if (failed()) return Error(absl::StatusCode::kUnavailable, "STORE_FAILED", "the store failed");
  // Every write with a sequence number up to `target` is already in the log (its buffer in
  // memory at least: FlushWAL writes the buffer, then syncs).
  const uint64_t target = db_->GetLatestSequenceNumber();
  absl::MutexLock lock(&sync_mu_);
  while (durable_seq_ < target) {
    if (syncing_) {
      // Another caller's fsync is under way: wait for it, then see whether it covered us.
      auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(sync_mu_) { return !syncing_; };
      sync_mu_.Await(absl::Condition(&done));
      continue;
    }
    syncing_ = true;
    const uint64_t covering = db_->GetLatestSequenceNumber();
    sync_mu_.Unlock();
    rocksdb::Status synced = db_->FlushWAL(/*sync=*/true);
    sync_mu_.Lock();
    syncing_ = false;
    if (!synced.ok()) {
      MarkFailed();
      return FromRocks(synced, "sync");
    }
    durable_seq_ = std::max(durable_seq_, covering);
  }
  return absl::OkStatus();
}

bool RocksStore::AnsweredAtOnce() {
  if (failed() || inline_durability_) return true;  // AwaitDurable answers a failed store
  absl::MutexLock lock(&sync_mu_);
  return unwritten_.load() == 0 && durable_seq_ >= db_->GetLatestSequenceNumber();
}

void RocksStore::WhenDurable(DurableFn done) {
  if (db_ == nullptr) {
    done(Error(absl::StatusCode::kUnavailable, "STORE_CLOSED", "the store is closed"));
    return;
  }
  if (AnsweredAtOnce()) {
    done(AwaitDurable());
    return;
  }
  Enqueue(Waiter{std::nullopt, "", [done = std::move(done)](absl::Status status, bool) {
                   done(std::move(status));
                 }});
}

void RocksStore::WhenDurableLeadingWhenIdle(DurableFn done) {
  bool quiet = false;
  if (db_ != nullptr && !AnsweredAtOnce()) {
    absl::MutexLock lock(&committer_mu_);
    // (A queued batch is in waiters_ until the committer takes it, which is committing_.)
    quiet = single_rounds_ >= kQuietRounds && waiters_.empty() && !committing_;
  }
  if (quiet) {
    absl::MutexLock lock(&sync_mu_);
    quiet = !syncing_;
  }
  if (!quiet) {
    WhenDurable(std::move(done));
    return;
  }
  // Two callers may both find the store quiet: AwaitDurable serializes their syncs, and
  // the second is covered by the first or syncs again.
  led_syncs_.fetch_add(1, std::memory_order_relaxed);
  absl::Status durable = AwaitDurable();
  {
    absl::MutexLock lock(&committer_mu_);
    if (!waiters_.empty()) single_rounds_ = 0;  // others came meanwhile: the store is busy
  }
  done(std::move(durable));
}

void RocksStore::WriteWhenDurable(rocksdb::WriteBatch batch, const char* what, WrittenFn done) {
  if (db_ == nullptr) {
    done(Error(absl::StatusCode::kUnavailable, "STORE_CLOSED", "the store is closed"), false);
    return;
  }
  // Refused at once when the write would be (a failed store, a full disk).
  if (absl::Status writable = CheckWritable(); !writable.ok()) {
    done(std::move(writable), false);
    return;
  }
  if (inline_durability_) {
    absl::Status written = Write(&batch, /*sync=*/false, what);
    if (!written.ok()) {
      done(std::move(written), false);
      return;
    }
    done(AwaitDurable(), true);
    return;
  }
  Enqueue(Waiter{std::move(batch), what, std::move(done)});
}

void RocksStore::Enqueue(Waiter waiter) {
  bool closing = false;
  {
    absl::MutexLock lock(&committer_mu_);
    closing = stop_committer_;
    if (!closing) {
      if (waiter.batch.has_value()) ++unwritten_;
      waiters_.push_back(std::move(waiter));
      if (!committer_.joinable()) committer_ = std::thread([this] { CommitterLoop(); });
    }
  }
  if (closing) {
    waiter.done(Error(absl::StatusCode::kUnavailable, "STORE_CLOSED", "the store is closing"),
                false);
  }
}

void RocksStore::CommitterLoop() {
  while (true) {
    std::vector<Waiter> group;
    {
      absl::MutexLock lock(&committer_mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(committer_mu_) {
        return !waiters_.empty() || stop_committer_;
      };
      committer_mu_.Await(absl::Condition(&ready));
      if (waiters_.empty()) return;  // stopping, and nobody waits
      group.swap(waiters_);
      committing_ = true;
    }
    // The group's batches, in arrival order, from this one thread: no other writer of the
    // group waits in RocksDB's write queue. A batch that cannot be written fails alone
    // (a failed write trips the breaker, so the rest are refused too).
    std::vector<absl::Status> written(group.size());
    int batches = 0;
    for (size_t i = 0; i < group.size(); ++i) {
      if (!group[i].batch.has_value()) continue;
      written[i] = Write(&*group[i].batch, /*sync=*/false, group[i].what);
      ++batches;
    }
    unwritten_.fetch_sub(batches);
    // Every waiter of the group wrote before it queued, or above: one sync covers them
    // all. Those that queue meanwhile wait for the next round.
    const absl::Status durable = AwaitDurable();
    {
      absl::MutexLock lock(&committer_mu_);
      committing_ = false;
      single_rounds_ = group.size() == 1 ? std::min(single_rounds_ + 1, kQuietRounds) : 0;
    }
    // The group's callbacks run back to back: what they start together (the outcome
    // records of the answers they carry) is done once for all, as the batch closes.
    CallbackBatch together;
    for (size_t i = 0; i < group.size(); ++i) {
      if (!written[i].ok()) {
        group[i].done(written[i], false);
      } else {
        group[i].done(durable, group[i].batch.has_value());
      }
    }
  }
}

void RocksStore::StopCommitter() {
  {
    absl::MutexLock lock(&committer_mu_);
    stop_committer_ = true;
  }
  if (committer_.joinable()) committer_.join();  // it serves the waiters left first
}

}  // namespace eonce
