// CallbackBatch: marks callbacks that one thread runs back to back (the answers of one
// batched call), so that the work they start can be done once for all of them.
//
// A callback that would write one record asks Defer(): inside an open batch on its
// thread, it queues its work and registers a flush under its owner (once per owner),
// which the batch runs when it closes; outside, Defer returns false and the callback does
// the work at once. The owner's flush then writes everything queued in one go: one
// RocksDB write for sixty answers instead of sixty writes that meet in the write queue.
// Batches nest; only the outermost one flushes. Not thread-safe by design: a batch
// belongs to the thread that opened it, and each thread has its own.
#ifndef EONCE_COMMON_BASE_CALLBACK_BATCH_H_
#define EONCE_COMMON_BASE_CALLBACK_BATCH_H_

#include <functional>
#include <utility>
#include <vector>

namespace eonce {

class CallbackBatch {
 public:
  CallbackBatch();
  // Runs the registered flushes, in the order they were registered (a flush that defers
  // more work registers again and runs after).
  ~CallbackBatch();
  CallbackBatch(const CallbackBatch&) = delete;
  CallbackBatch& operator=(const CallbackBatch&) = delete;

  // Within a batch open on this thread: registers `flush` for `owner` unless one is
  // registered already, and returns true. Outside one: returns false.
  static bool Defer(const void* owner, std::function<void()> flush);

 private:
  CallbackBatch* outer_;
  std::vector<std::pair<const void*, std::function<void()>>> flushes_;
};

}  // namespace eonce

#endif  // EONCE_COMMON_BASE_CALLBACK_BATCH_H_
