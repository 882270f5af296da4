#include "common/rpc/call_tracker.h"

#include <utility>
#include <vector>

namespace eonce {

bool CallTracker::Start(Ticket& ticket, std::weak_ptr<grpc::ClientContext> context) {
  absl::MutexLock lock(&mu_);
  if (closing_) return false;
  ticket.tracker_ = this;
  ticket.id_ = next_++;
  calls_[ticket.id_] = std::move(context);
  return true;
}

void CallTracker::Finished(uint64_t id) {
  absl::MutexLock lock(&mu_);
  calls_.erase(id);
}

void CallTracker::CloseAndWait() {
  std::vector<std::shared_ptr<grpc::ClientContext>> live;
  {
    absl::MutexLock lock(&mu_);
    closing_ = true;
    for (auto& [id, call] : calls_) {
      if (auto context = call.lock()) live.push_back(std::move(context));
    }
  }
  // Outside the lock: a cancelled call's state may go on this thread.
  for (auto& context : live) context->TryCancel();
  live.clear();
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](std::map<uint64_t, std::weak_ptr<grpc::ClientContext>>* calls) {
        return calls->empty();
      },
      &calls_));
}

}  // namespace eonce
