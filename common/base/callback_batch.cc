#include "common/base/callback_batch.h"

#include <algorithm>

namespace eonce {
namespace {

thread_local CallbackBatch* open_batch = nullptr;

}  // namespace

CallbackBatch::CallbackBatch() : outer_(open_batch) {
  if (outer_ == nullptr) open_batch = this;
}

CallbackBatch::~CallbackBatch() {
  if (outer_ != nullptr) return;  // nested: the outermost batch flushes
  // A flush may defer again (its work starts more callbacks on this thread): those run
  // after it, in turn, until nothing is left.
  while (!flushes_.empty()) {
    auto flushes = std::move(flushes_);
    flushes_.clear();
    for (auto& [owner, flush] : flushes) flush();
  }
  open_batch = nullptr;
}

bool CallbackBatch::Defer(const void* owner, std::function<void()> flush) {
  CallbackBatch* batch = open_batch;
  if (batch == nullptr) return false;
  auto& flushes = batch->flushes_;
  const bool registered = std::any_of(flushes.begin(), flushes.end(),
                                      [owner](const auto& f) { return f.first == owner; });
  if (!registered) flushes.emplace_back(owner, std::move(flush));
  return true;
}

}  // namespace eonce
