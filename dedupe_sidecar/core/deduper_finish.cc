// How the Deduper stores a business's answer and answers its caller (Finish). The answers
// of one batched business call arrive back to back on one thread, inside a CallbackBatch:
// their outcome records are then written together, in one RocksDB write, when the batch
// closes, instead of one write each.
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/string_view.h"
#include "common/base/callback_batch.h"
#include "common/base/status.h"
#include "common/command/trace_context.h"
#include "dedupe_sidecar/core/deduper.h"
#include "dedupe_sidecar/core/deduper_context.h"

namespace eonce {

void Deduper::Finish(const std::shared_ptr<Context>& ctx, uint64_t token, v1::CallResult result,
                     int64_t entity_revision, const char* decision, bool kept) {
  Finishing finishing{ctx, token, std::move(result), entity_revision, decision, kept};
  if (CallbackBatch::Defer(this, [this] { FinishQueued(); })) {
    // Bounded by the answers of the batch being delivered on this thread.
    absl::MutexLock lock(&finishing_mu_);
    finishing_.push_back(std::move(finishing));
    return;
  }
  std::vector<Finishing> one;
  one.push_back(std::move(finishing));
  FinishAll(std::move(one));
}

void Deduper::FinishQueued() {
  std::vector<Finishing> finishing;
  {
    absl::MutexLock lock(&finishing_mu_);
    finishing.swap(finishing_);
  }
  if (!finishing.empty()) FinishAll(std::move(finishing));  // else another thread took them
}

void Deduper::FinishAll(std::vector<Finishing> finishing) {
  while (!finishing.empty()) {
    // A key met twice (two attempts' answers in one batch) waits for the next round, so
    // that it reads what the first one wrote.
    std::vector<Finishing> now, later;
    std::vector<absl::string_view> keys;
    absl::flat_hash_set<absl::string_view> seen;
    for (Finishing& f : finishing) {
      if (seen.insert(f.ctx->scoped_key).second) {
        keys.push_back(f.ctx->scoped_key);
        now.push_back(std::move(f));
      } else {
        later.push_back(std::move(f));
      }
    }
    FinishRound(now, keys);
    finishing = std::move(later);
  }
}

void Deduper::FinishRound(std::vector<Finishing>& finishing,
                          const std::vector<absl::string_view>& keys) {
  struct Stored {
    absl::StatusOr<v1::SubmitResponse> answer = absl::InternalError("unset");
    std::optional<Record::State> await;  // what must be durable before the answer
    bool wrote = false;                  // this call wrote the outcome (not_durable_ has it)
    bool claimed = false;                // this attempt held a claim, not a record
    std::optional<Record> record;        // the outcome to write
  };
  std::vector<Stored> stored(finishing.size());
  {
    // Every key's lock, for the reads, the one write and the claims' removal: no
    // duplicate sees neither the claim nor the outcome.
    StripedLocks::Guard guard = locks_.Lock(keys);
    std::vector<RecordStore::RecordWrite> writes;
    for (size_t i = 0; i < finishing.size(); ++i) {
      Finishing& f = finishing[i];
      const Context& ctx = *f.ctx;
      Stored& s = stored[i];
      // This attempt's claim, if it still holds one; the stored record otherwise.
      std::optional<Record> claim = claims_.HeldBy(ctx.scoped_key, f.token);
      s.claimed = claim.has_value();
      absl::StatusOr<std::optional<Record>> existing =
          s.claimed ? std::move(claim)
                    : store_.Get(ctx.caller.tenant, ctx.command.idempotency_key());
      if (!existing.ok()) {
        stats_.store_errors++;
        s.answer = existing.status();
        continue;
      }
      if (!s.claimed && !store_.HeldBy(*existing, f.token)) {
        // A newer attempt holds the record: this answer is stale and must not overwrite.
        stats_.fenced++;
        if (existing->has_value() && IsFinished(**existing) && !(*existing)->tombstone()) {
          s.answer = Response(ctx, **existing, v1::REPLAYED);
          s.await = (*existing)->state();
        } else {
          s.answer = WithRetryAfter(Error(absl::StatusCode::kUnavailable, "IN_PROGRESS",
                                          "a newer attempt of this command holds it"),
                                    kPendingRetryMs);
        }
        continue;
      }
      Record& record = s.record.emplace(std::move(**existing));
      record.set_state(f.result.code() == 0 ? Record::COMMITTED : Record::FAILED);
      *record.mutable_result() = std::move(f.result);
      record.set_entity_revision(f.entity_revision);
      record.set_updated_ms(clock_.NowMs());
      record.clear_lease_owner();
      record.set_lease_expires_ms(0);
      // An outcome is only answered once it will be replayed after a crash: held by the
      // business's inbox (`kept`), or written here and awaited on the disk below, once
      // the locks are released.
      if (!f.kept) not_durable_.Add(ctx.scoped_key);
      writes.push_back(RecordStore::RecordWrite{
          &record, s.claimed ? Record::STATE_UNSPECIFIED : Record::STARTED});
    }
    const absl::Status written =
        writes.empty() ? absl::OkStatus() : store_.WriteMany(writes, /*sync=*/false);
    for (size_t i = 0; i < finishing.size(); ++i) {
      const Finishing& f = finishing[i];
      Stored& s = stored[i];
      if (!s.record.has_value()) continue;
      if (!written.ok()) {
        // A claim stays and blocks until its lease ends, as a started record would.
        stats_.store_errors++;
        s.answer = written;
        continue;
      }
      // The outcome is in the store: the claim can go.
      if (s.claimed) claims_.Remove(f.ctx->scoped_key, f.token);
      const int code = s.record->result().code();
      (code == 0 ? stats_.applied : stats_.rejected)++;
      if (std::string(f.decision) == "recovered") stats_.recovered++;
      Audit(*f.ctx, f.decision, CodeName(code), f.token);
      LogSampledStep("command finished",
                     {{"command_id", f.ctx->command.command_id()},
                      {"key", f.ctx->command.idempotency_key()},
                      {"tenant", f.ctx->caller.tenant},
                      {"decision", f.decision},
                      {"result", CodeName(code)}},
                     f.ctx->command.trace());
      s.answer = Response(*f.ctx, *s.record, v1::APPLIED);
      if (!f.kept) {
        s.await = s.record->state();
        s.wrote = true;
      }
    }
  }
  for (size_t i = 0; i < finishing.size(); ++i) {
    AnswerStored(finishing[i].ctx, std::move(stored[i].answer), stored[i].await,
                 stored[i].wrote);
  }
}

void Deduper::AnswerStored(const std::shared_ptr<Context>& ctx,
                           absl::StatusOr<v1::SubmitResponse> answer,
                           std::optional<Record::State> await, bool wrote) {
  auto respond = [this, ctx](absl::StatusOr<v1::SubmitResponse> answer) {
    if (answer.ok()) {
      if (absl::Status fault = HitFault(faults_, FaultPoint::kAfterCommitBeforeResponse);
          !fault.ok()) {
        answer = fault;
      }
    }
    ctx->Answer(std::move(answer));
  };
  if (!answer.ok() || !await.has_value()) {
    respond(std::move(answer));
    return;
  }
  // The outcome is answered once it is durable (one fsync for every call waiting then),
  // from the store's committer thread.
  AfterDurable(ctx->scoped_key, *await, wrote,
               [this, ctx, wrote, respond = std::move(respond),
                answer = std::move(answer)](absl::Status durable) mutable {
                 if (!durable.ok()) {
                   stats_.store_errors++;
                   respond(durable);
                   return;
                 }
                 if (wrote) not_durable_.Remove(ctx->scoped_key);
                 respond(std::move(answer));
               });
}

void Deduper::AfterDurable(const std::string& scoped_key, Record::State state, bool wrote,
                           RocksStore::DurableFn then) {
  if (!wrote && !not_durable_.Contains(scoped_key)) {
    then(absl::OkStatus());  // an outcome already on disk
    return;
  }
  store_.WhenDurable(state, std::move(then));
}

}  // namespace eonce
