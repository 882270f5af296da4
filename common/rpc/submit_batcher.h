// SubmitBatcher: a client's many concurrent Submits to one sidecar, sent as SubmitBatch
// calls (a CommandBatcher: common/rpc/command_batcher.h says how commands are grouped).
#ifndef EONCE_COMMON_RPC_SUBMIT_BATCHER_H_
#define EONCE_COMMON_RPC_SUBMIT_BATCHER_H_

#include <cstdint>
#include <utility>

#include "common/rpc/command_batcher.h"
#include "eonce/v1/sidecar.pb.h"

namespace eonce {

class SubmitBatcher : public CommandBatcher<v1::SubmitResponse, v1::SubmitBatchResponse> {
 public:
  SubmitBatcher(Options options, SendBatch send)
      : CommandBatcher("the sidecar", options, std::move(send)) {}

  // CommandBatcher::Add: `done` runs exactly once.
  void Submit(v1::Command command, int64_t deadline_ms, Done done) {
    Add(std::move(command), deadline_ms, std::move(done));
  }
};

}  // namespace eonce

#endif  // EONCE_COMMON_RPC_SUBMIT_BATCHER_H_
