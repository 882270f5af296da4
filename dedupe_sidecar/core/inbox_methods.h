// InboxMethods: which business methods keep their outcome in an inbox, learned from the
// business's answers (`eonce-inbox: kept`, upstream.h). For such a method the business's
// durable write is the commit point, so the Deduper forwards before its `started` record
// is synced and answers before its outcome is (docs/design.md, "Where the truth is").
//
// A method counts as kept only after an answer said so, and stops counting at the first
// answer that does not (a business redeployed in legacy mode): until then, and for every
// method never answered, the sidecar syncs as for a legacy business. Bounded: past
// kMaxMethods no new method is remembered, and those stay synced.
#ifndef EONCE_DEDUPE_SIDECAR_CORE_INBOX_METHODS_H_
#define EONCE_DEDUPE_SIDECAR_CORE_INBOX_METHODS_H_

#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

namespace eonce {

class InboxMethods {
 public:
  static constexpr size_t kMaxMethods = 4096;

  bool Kept(const std::string& method) const {
    absl::ReaderMutexLock lock(&mu_);
    auto it = kept_.find(method);
    return it != kept_.end() && it->second;
  }

  void Learn(const std::string& method, bool kept) {
    if (Known(method, kept)) return;  // the common case: nothing changes
    absl::MutexLock lock(&mu_);
    auto it = kept_.find(method);
    if (it != kept_.end()) {
      it->second = kept;
    } else if (kept_.size() < kMaxMethods) {
      kept_.emplace(method, kept);
    }
  }

 private:
  bool Known(const std::string& method, bool kept) const {
    absl::ReaderMutexLock lock(&mu_);
    auto it = kept_.find(method);
    return it != kept_.end() ? it->second == kept : !kept;
  }

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, bool> kept_ ABSL_GUARDED_BY(mu_);
};

}  // namespace eonce

#endif  // EONCE_DEDUPE_SIDECAR_CORE_INBOX_METHODS_H_
