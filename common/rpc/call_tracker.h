// CallTracker: a gRPC client's asynchronous calls in flight, so that the client's end
// cancels them and waits until each one's state is gone.
//
// Waiting until each callback has run is not enough. gRPC destroys a callback's closure
// on its own callback thread after the callback returns, and whatever the closure owns
// goes then: its grpc::ClientContext, which owns a reference to the channel. Were that the
// channel's last one, gRPC 1.51 (whose callback queue is shared by every channel and
// server of the process, and ended with the last of them) would end the queue from that
// very thread and free it while the thread still polls it: the process aborts. So a
// call's Ticket lives in its state, declared before the ClientContext (members go in
// reverse order): the call counts as finished only once its context, and with it the
// channel reference, is gone.
#ifndef EONCE_COMMON_RPC_CALL_TRACKER_H_
#define EONCE_COMMON_RPC_CALL_TRACKER_H_

#include <cstdint>
#include <map>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/client_context.h"

namespace eonce {

class CallTracker {
 public:
  // One call's place in the tracker; says the call finished when it is destroyed.
  class Ticket {
   public:
    Ticket() = default;
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;
    ~Ticket() {
      if (tracker_ != nullptr) tracker_->Finished(id_);
    }

   private:
    friend class CallTracker;
    CallTracker* tracker_ = nullptr;
    uint64_t id_ = 0;
  };

  CallTracker() = default;
  CallTracker(const CallTracker&) = delete;
  CallTracker& operator=(const CallTracker&) = delete;
  ~CallTracker() { CloseAndWait(); }

  // Registers a call before it starts: `ticket` and `context` belong to the call's state.
  // False once closing (the caller then answers without starting the call).
  bool Start(Ticket& ticket, std::weak_ptr<grpc::ClientContext> context);
  // The same for a state whose members `ticket` and `context` (a grpc::ClientContext) are
  // those.
  template <typename State>
  bool Start(const std::shared_ptr<State>& state) {
    return Start(state->ticket, std::shared_ptr<grpc::ClientContext>(state, &state->context));
  }

  // Refuses new calls, cancels those in flight, and waits until each one's ticket is gone.
  void CloseAndWait();

 private:
  void Finished(uint64_t id);

  absl::Mutex mu_;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<uint64_t, std::weak_ptr<grpc::ClientContext>> calls_ ABSL_GUARDED_BY(mu_);
};

}  // namespace eonce

#endif  // EONCE_COMMON_RPC_CALL_TRACKER_H_
