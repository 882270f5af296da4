#include "outbox_agent/transport/submit_batcher_registry.h"

#include <iterator>
#include <utility>

namespace eonce {

std::shared_ptr<SubmitBatcher> SubmitBatcherRegistry::For(
    const Key& key, const std::function<std::unique_ptr<SubmitBatcher>()>& make) {
  absl::MutexLock lock(&mu_);
  auto it = batchers_.find(key);
  if (it != batchers_.end()) return it->second;
  if (batchers_.size() >= max_kept_) {
    // Copies of a batcher's pointer are only made under mu_, so a use count of 1 seen
    // here means no caller holds it and none can take it before it is erased.
    for (auto old = batchers_.begin(); old != batchers_.end();) {
      const bool unheld = old->second.use_count() == 1;
      old = unheld && old->second->Idle() ? batchers_.erase(old) : std::next(old);
    }
  }
  std::shared_ptr<SubmitBatcher> batcher = make();
  batchers_[key] = batcher;
  return batcher;
}

size_t SubmitBatcherRegistry::size() {
  absl::MutexLock lock(&mu_);
  return batchers_.size();
}

}  // namespace eonce
