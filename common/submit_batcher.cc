#include "common/submit_batcher.h"

#include <algorithm>
#include <utility>

#include "common/command.h"
#include "common/grpc_status.h"

namespace eonce {
namespace {

CallBatcherOptions BatcherOptions(const SubmitBatcher::Options& options) {
  CallBatcherOptions out;
  out.max_calls = options.max_calls;
  out.max_batch = std::clamp(options.max_batch, 1, kMaxBatchCommands);
  out.max_batch_bytes = options.max_batch_bytes;
  out.max_waiting = options.max_waiting;
  return out;
}

}  // namespace

SubmitBatcher::SubmitBatcher(Options options, SendBatch send)
    : batcher_("the sidecar", BatcherOptions(options),
               Batcher::Hooks{std::move(send),
                              [](const v1::Command& command) { return command.ByteSizeLong(); },
                              [](const absl::Status& status) { return Answer(status); },
                              [](const absl::Status& status) { return Answer(status); }}) {}

std::vector<SubmitBatcher::Answer> SubmitBatcher::AnswersOf(v1::SubmitBatchResponse& response) {
  std::vector<Answer> answers;
  answers.reserve(response.items_size());
  for (v1::SubmitBatchItem& item : *response.mutable_items()) {
    if (item.code() == 0) {
      answers.emplace_back(std::move(*item.mutable_response()));
    } else {
      answers.emplace_back(StatusFromParts(item.code(), item.message(), item.error_details()));
    }
  }
  return answers;
}

}  // namespace eonce
