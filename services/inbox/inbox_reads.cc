// The inbox's reads (a command's outcome, the effect ledger) and the helpers that read
// its answers. See inbox.h.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/rpc/error_details.h"
#include "common/base/status.h"
#include "services/inbox/inbox.h"
#include "services/inbox/inbox_internal.h"

namespace eonce {

using inbox_internal::kEffectsCf;
using inbox_internal::SeqKey;
using inbox_internal::SeqOfKey;

uint64_t Inbox::CommittedWatermark() {
  absl::MutexLock lock(&seq_mu_);
  return uncommitted_seqs_.empty() ? next_effect_seq_ - 1 : *uncommitted_seqs_.begin() - 1;
}

absl::StatusOr<v1::QueryOutcomeResponse> Inbox::QueryOutcome(const std::string& tenant,
                                                            const std::string& command_id) {
  if (legacy_mode_) {
    return absl::UnimplementedError("this service keeps no inbox (legacy mode)");
  }
  if (command_id.empty()) {
    return Error(absl::StatusCode::kInvalidArgument, "INVALID_FIELD", "command_id: required");
  }
  EONCE_ASSIGN_OR_RETURN(auto stored, Lookup(tenant, command_id));
  v1::QueryOutcomeResponse response;
  if (stored.has_value()) {
    // An entry is only reported once it is durable (its Run may still be awaiting it).
    EONCE_RETURN_IF_ERROR(AwaitDurable());
    response.set_applied(true);
    *response.mutable_result() = stored->result();
    response.set_applied_at_ms(stored->applied_at_ms());
  }
  return response;
}

absl::StatusOr<v1::ListEffectsResponse> Inbox::ListEffects(uint64_t after_seq, int limit,
                                                           const std::string& tenant) {
  limit = std::clamp(limit <= 0 ? 1000 : limit, 1, 10000);
  v1::ListEffectsResponse response;
  // Read before the iterator: every effect up to it is already in the store.
  const uint64_t watermark = CommittedWatermark();
  // ... and durable once this returns: a reader never sees an effect a power cut could
  // take back.
  EONCE_RETURN_IF_ERROR(AwaitDurable());
  std::unique_ptr<rocksdb::Iterator> it = store_.NewIterator(kEffectsCf);
  int scanned = 0;
  for (it->Seek(SeqKey(after_seq + 1)); it->Valid() && response.effects_size() < limit &&
                                        SeqOfKey(it->key()) <= watermark &&
                                        scanned < kMaxEffectsScanned;
       it->Next(), ++scanned) {
    v1::Effect effect;
    if (!effect.ParseFromArray(it->value().data(), static_cast<int>(it->value().size()))) {
      return Error(absl::StatusCode::kDataLoss, "STORE_CORRUPT", "undecodable effect");
    }
    response.set_last_seq(SeqOfKey(it->key()));
    if (!tenant.empty() && effect.tenant() != tenant) continue;
    // A slot handed off is its new owner's to list (a copy stays here until the drop).
    if (effect.has_slot() && effect.slot() < kSlotCount && fences_.handed_off(effect.slot())) {
      continue;
    }
    *response.add_effects() = std::move(effect);
  }
  EONCE_RETURN_IF_ERROR(FromRocks(it->status(), "list effects"));
  if (response.last_seq() == 0) response.set_last_seq(after_seq);
  return response;
}

bool IsKeyConflict(const absl::Status& status) {
  if (status.code() != absl::StatusCode::kAlreadyExists) return false;
  std::string reason = ReasonOf(status);
  return reason == "KEY_REUSED" || reason == "IDEMPOTENCY_CONFLICT";
}

v1::CallResult RejectionResult(absl::StatusCode code, const std::string& reason,
                               const std::string& detail) {
  v1::CallResult result;
  result.set_code(static_cast<int>(code));
  result.set_message(absl::StrCat(reason, ": ", detail));
  v1::Rejection rejection;
  rejection.set_reason(reason);
  rejection.set_detail(detail);
  result.set_error_details(RejectionStatusDetails(code, result.message(), rejection));
  return result;
}

}  // namespace eonce
