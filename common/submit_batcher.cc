#include "common/submit_batcher.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/callback_batch.h"
#include "common/command.h"
#include "common/grpc_status.h"
#include "common/status.h"

namespace eonce {

SubmitBatcher::SubmitBatcher(Options options, SendBatch send)
    : options_(options), send_(std::move(send)) {}

SubmitBatcher::~SubmitBatcher() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](int* calls) { return *calls == 0; }, &calls_));
}

void SubmitBatcher::Submit(v1::Command command, int64_t deadline_ms, Done done) {
  std::vector<Waiting> batch;
  bool full = false;
  {
    absl::MutexLock lock(&mu_);
    full = waiting_.size() >= options_.max_waiting;
    if (!full) {
      waiting_.push_back(Waiting{std::move(command), deadline_ms, std::move(done)});
      batch = TakeBatch();
    }
  }
  if (full) {
    done(WithRetryAfter(
        Error(absl::StatusCode::kResourceExhausted, "OVERLOADED",
              absl::StrCat(options_.max_waiting,
                           " commands already wait for a call to the sidecar; nothing was sent")),
        10));
    return;
  }
  if (!batch.empty()) Send(std::move(batch));
}

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

bool SubmitBatcher::Idle() {
  absl::MutexLock lock(&mu_);
  return calls_ == 0 && waiting_.empty();
}

std::vector<SubmitBatcher::Waiting> SubmitBatcher::TakeBatch() {
  std::vector<Waiting> batch;
  if (waiting_.empty() || calls_ >= options_.max_calls) return batch;
  const size_t n = std::min<size_t>(
      waiting_.size(), static_cast<size_t>(std::clamp(options_.max_batch, 1, kMaxBatchCommands)));
  batch.reserve(n);
  size_t bytes = 0;
  while (batch.size() < n) {
    const size_t size = waiting_.front().command.ByteSizeLong();
    if (!batch.empty() && bytes + size > options_.max_batch_bytes) break;
    bytes += size;
    batch.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
  ++calls_;
  return batch;
}

void SubmitBatcher::Send(std::vector<Waiting> batch) {
  std::vector<v1::Command> commands;
  commands.reserve(batch.size());
  int64_t deadline_ms = 0;
  for (Waiting& w : batch) {
    commands.push_back(std::move(w.command));
    if (w.deadline_ms > 0 && (deadline_ms == 0 || w.deadline_ms < deadline_ms)) {
      deadline_ms = w.deadline_ms;
    }
  }
  auto held = std::make_shared<std::vector<Waiting>>(std::move(batch));
  send_(std::move(commands), deadline_ms, [this, held](absl::StatusOr<std::vector<Answer>> answers) {
    OnAnswer(std::move(*held), std::move(answers));
  });
}

void SubmitBatcher::OnAnswer(std::vector<Waiting> batch,
                             absl::StatusOr<std::vector<Answer>> answers) {
  if (answers.ok() && answers->size() != batch.size()) {
    answers = Error(absl::StatusCode::kInternal, "BATCH_MISMATCH",
                    absl::StrCat("the sidecar answered ", answers->size(), " of ",
                                 batch.size(), " commands; their outcome is unknown"));
  }
  {
    // The answers are delivered back to back: what they start may be done once for all.
    CallbackBatch together;
    for (size_t i = 0; i < batch.size(); ++i) {
      batch[i].done(answers.ok() ? std::move((*answers)[i]) : Answer(answers.status()));
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

}  // namespace eonce
