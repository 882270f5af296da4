// SubmitBatcherRegistry: the SubmitBatchers of a client, one per sidecar and session.
//
// Sessions change with each credential epoch and a sharded route's stubs with its slot
// map, so keys come and go; past `max_kept` batchers, those that are idle and that no
// caller holds are dropped when a new one is made. A batcher is handed out as a
// shared_ptr, and one whose hand-out is still held is never dropped: a caller that got an
// empty (hence idle) batcher and is about to add to it must not find it destroyed by
// another thread's clean-up. Thread-safe.
#ifndef EONCE_OUTBOX_AGENT_TRANSPORT_SUBMIT_BATCHER_REGISTRY_H_
#define EONCE_OUTBOX_AGENT_TRANSPORT_SUBMIT_BATCHER_REGISTRY_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "absl/synchronization/mutex.h"
#include "common/rpc/submit_batcher.h"

namespace eonce {

class SubmitBatcherRegistry {
 public:
  // (the sidecar's stub, tenant, actor, credential epoch).
  using Key = std::tuple<const void*, std::string, std::string, int64_t>;

  explicit SubmitBatcherRegistry(size_t max_kept) : max_kept_(max_kept) {}

  // The batcher for `key`, made by `make` when none is held. Hold the result only while
  // adding to it: a held batcher is never dropped, so it can be kept past max_kept.
  std::shared_ptr<SubmitBatcher> For(const Key& key,
                                     const std::function<std::unique_ptr<SubmitBatcher>()>& make);

  size_t size();

 private:
  const size_t max_kept_;
  absl::Mutex mu_;
  std::map<Key, std::shared_ptr<SubmitBatcher>> batchers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace eonce

#endif  // EONCE_OUTBOX_AGENT_TRANSPORT_SUBMIT_BATCHER_REGISTRY_H_
