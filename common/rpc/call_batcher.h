// CallBatcher: many concurrent calls to one peer, sent as batch calls. An item goes at once
// while fewer than `max_calls` batches are in flight; the items that arrive meanwhile wait
// for the next free call and go together (at most `max_batch` and `max_batch_bytes` each;
// an item larger than that alone goes alone). Alone, an item is never delayed; under load,
// one call's fixed cost is shared by many items. Each item still gets its own answer,
// exactly once, on the thread that delivers its batch's answer, and a batch's answers are
// delivered inside one CallbackBatch, so that what they start may be done once for all.
//
// Bounded: at most `max_waiting` items wait; past it an item is refused at once with
// RESOURCE_EXHAUSTED (OVERLOADED), nothing sent. Thread-safe; the destructor waits for the
// calls in flight.
#ifndef EONCE_COMMON_RPC_CALL_BATCHER_H_
#define EONCE_COMMON_RPC_CALL_BATCHER_H_

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/base/callback_batch.h"
#include "common/base/status.h"

namespace eonce {

struct CallBatcherOptions {
  int max_calls = 4;                 // batches in flight at once
  int max_batch = 64;                // items per batch
  size_t max_batch_bytes = 4 << 20;  // bytes of items per batch
  size_t max_waiting = 4096;         // items queued for a free call; past it, refused
};

template <typename Item, typename Answer>
class CallBatcher {
 public:
  using Done = std::function<void(Answer)>;
  // The answer to one batch call: one answer per item in the order sent, or the call's
  // failure.
  using BatchDone = std::function<void(absl::StatusOr<std::vector<Answer>>)>;
  struct Hooks {
    // Sends one batch call, due by `deadline_ms` (the earliest of its items'; 0: none);
    // `done` runs exactly once, possibly on another thread.
    std::function<void(std::vector<Item> items, int64_t deadline_ms, BatchDone done)> send;
    std::function<size_t(const Item&)> size_of;
    // An item's answer when its batch call failed: sent, and the status says how.
    std::function<Answer(const absl::Status&)> failed;
    // An item's answer when it was refused for want of room (RESOURCE_EXHAUSTED,
    // OVERLOADED): never sent.
    std::function<Answer(const absl::Status&)> refused;
  };

  // One item with its deadline and its answer's callback.
  struct Waiting {
    Item item;
    int64_t deadline_ms;  // 0: none
    Done done;
  };

  // `peer` names the peer in errors ("the sidecar").
  CallBatcher(std::string peer, CallBatcherOptions options, Hooks hooks)
      : peer_(std::move(peer)), options_(options), hooks_(std::move(hooks)) {}

  ~CallBatcher() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](int* calls) { return *calls == 0; }, &calls_));
  }

  // `done` runs exactly once: with the item's own answer, with its batch's failure, or at
  // once when max_waiting items wait. `deadline_ms`: when its answer is due (0: none).
  void Add(Item item, int64_t deadline_ms, Done done) {
    std::vector<Waiting> batch;
    bool full = false;
    {
      absl::MutexLock lock(&mu_);
      full = waiting_.size() >= options_.max_waiting;
      if (!full) {
        waiting_.push_back(Waiting{std::move(item), deadline_ms, std::move(done)});
        batch = TakeBatch();
      }
    }
    if (full) {
      done(hooks_.refused(Overloaded()));
      return;
    }
    if (!batch.empty()) Send(std::move(batch));
  }

  // Adds several items at once, as one Add each, but lets none of them go before all are
  // queued: items handed over together (a replayer's round of attempts) leave as full
  // batches instead of a first batch of one. Those past max_waiting are refused as Add
  // refuses them.
  void AddMany(std::vector<Waiting> items) {
    std::vector<std::vector<Waiting>> batches;
    size_t taken = 0;
    {
      absl::MutexLock lock(&mu_);
      for (; taken < items.size() && waiting_.size() < options_.max_waiting; ++taken) {
        waiting_.push_back(std::move(items[taken]));
      }
      // At most max_calls batches go now; the rest wait for the first free call.
      for (std::vector<Waiting> batch = TakeBatch(); !batch.empty(); batch = TakeBatch()) {
        batches.push_back(std::move(batch));
      }
    }
    for (size_t i = taken; i < items.size(); ++i) items[i].done(hooks_.refused(Overloaded()));
    for (std::vector<Waiting>& batch : batches) Send(std::move(batch));
  }

  // Nothing waits and no call is in flight.
  bool Idle() {
    absl::MutexLock lock(&mu_);
    return calls_ == 0 && waiting_.empty();
  }

 private:
  absl::Status Overloaded() const {
    return WithRetryAfter(Error(absl::StatusCode::kResourceExhausted, "OVERLOADED",
                                absl::StrCat(options_.max_waiting,
                                             " calls already wait for a call to ", peer_,
                                             "; nothing was sent")),
                          10);
  }

  // Takes the next batch from the queue and counts its call; empty when none may go.
  std::vector<Waiting> TakeBatch() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::vector<Waiting> batch;
    if (waiting_.empty() || calls_ >= options_.max_calls) return batch;
    const size_t n =
        std::min<size_t>(waiting_.size(), static_cast<size_t>(std::max(options_.max_batch, 1)));
    batch.reserve(n);
    size_t bytes = 0;
    while (batch.size() < n) {
      const size_t size = hooks_.size_of(waiting_.front().item);
      if (!batch.empty() && bytes + size > options_.max_batch_bytes) break;
      bytes += size;
      batch.push_back(std::move(waiting_.front()));
      waiting_.pop_front();
    }
    ++calls_;
    return batch;
  }

  void Send(std::vector<Waiting> batch) {
    std::vector<Item> items;
    items.reserve(batch.size());
    int64_t deadline_ms = 0;
    for (Waiting& w : batch) {
      items.push_back(std::move(w.item));
      if (w.deadline_ms > 0 && (deadline_ms == 0 || w.deadline_ms < deadline_ms)) {
        deadline_ms = w.deadline_ms;
      }
    }
    auto held = std::make_shared<std::vector<Waiting>>(std::move(batch));
    hooks_.send(std::move(items), deadline_ms,
                [this, held](absl::StatusOr<std::vector<Answer>> answers) {
                  OnAnswer(std::move(*held), std::move(answers));
                });
  }

  void OnAnswer(std::vector<Waiting> batch, absl::StatusOr<std::vector<Answer>> answers) {
    if (answers.ok() && answers->size() != batch.size()) {
      answers = Error(absl::StatusCode::kInternal, "BATCH_MISMATCH",
                      absl::StrCat(peer_, " answered ", answers->size(), " of ", batch.size(),
                                   " calls; their outcome is unknown"));
    }
    {
      CallbackBatch together;
      for (size_t i = 0; i < batch.size(); ++i) {
        batch[i].done(answers.ok() ? std::move((*answers)[i]) : hooks_.failed(answers.status()));
      }
    }
    std::vector<Waiting> next;
    {
      absl::MutexLock lock(&mu_);
      --calls_;
      next = TakeBatch();
    }
    if (!next.empty()) Send(std::move(next));
  }

  const std::string peer_;
  const CallBatcherOptions options_;
  const Hooks hooks_;
  absl::Mutex mu_;
  std::deque<Waiting> waiting_ ABSL_GUARDED_BY(mu_);
  int calls_ ABSL_GUARDED_BY(mu_) = 0;
};

// Sends each item as a call of its own (`one`, whose callback runs exactly once), all at
// once, and calls `done` once with every answer in the items' order, after the last: the
// way back for a batch that a peer could not take, or answer, as one call.
template <typename Item, typename Answer>
void SendEachAlone(std::vector<Item> items,
                   const std::function<void(Item, std::function<void(Answer)>)>& one,
                   std::function<void(std::vector<Answer>)> done) {
  struct Gather {
    std::vector<Answer> answers;
    std::atomic<size_t> open;
    std::function<void(std::vector<Answer>)> done;
  };
  if (items.empty()) {
    done({});
    return;
  }
  auto gather = std::make_shared<Gather>();
  gather->answers.resize(items.size());
  gather->open.store(items.size());
  gather->done = std::move(done);
  for (size_t i = 0; i < items.size(); ++i) {
    one(std::move(items[i]), [gather, i](Answer answer) {
      gather->answers[i] = std::move(answer);
      if (gather->open.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        gather->done(std::move(gather->answers));
      }
    });
  }
}

}  // namespace eonce

#endif  // EONCE_COMMON_RPC_CALL_BATCHER_H_
