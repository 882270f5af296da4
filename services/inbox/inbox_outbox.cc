// The inbox's transactional outbox: follow-ups written with an effect, filed under its
// slot, pulled and acknowledged by a relay. See inbox.h.
#include <algorithm>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/base/hash.h"
#include "common/coord/slots.h"
#include "common/base/status.h"
#include "services/inbox/inbox.h"
#include "services/inbox/inbox_internal.h"

namespace eonce {

using inbox_internal::FollowUpKey;
using inbox_internal::FollowUpKeyParts;
using inbox_internal::FollowUpKeyPrefix;
using inbox_internal::kFollowUpsCf;
using inbox_internal::ParseFollowUpKey;

std::string Inbox::FollowUpCommandId(const std::string& tenant, const std::string& parent_id,
                                     int index) {
  std::string material = absl::StrCat("eonce.follow_up.v1", std::string(1, '\0'), tenant,
                                      std::string(1, '\0'), parent_id, std::string(1, '\0'),
                                      index);
  return absl::StrCat("fu-", absl::BytesToHexString(Sha256(material).substr(0, 20)));
}

absl::Status Inbox::WriteFollowUps(const CallIdentity& identity, uint64_t seq,
                                   const Applied& applied, rocksdb::WriteBatch* batch,
                                   std::optional<uint32_t> slot) {
  if (applied.follow_ups.empty()) return absl::OkStatus();
  if (!applied.effect.has_value() || identity.command_id.empty() ||
      applied.follow_ups.size() > static_cast<size_t>(kMaxFollowUps)) {
    return Error(absl::StatusCode::kInternal, "FOLLOW_UP_INVALID",
                 absl::StrCat("follow-ups need an effect and a command id, at most ",
                              kMaxFollowUps, "; nothing was applied"));
  }
  const int64_t now = clock_.NowMs();
  for (size_t i = 0; i < applied.follow_ups.size(); ++i) {
    const FollowUp& follow_up = applied.follow_ups[i];
    v1::Command command;
    command.set_command_id(FollowUpCommandId(identity.tenant, identity.command_id,
                                             static_cast<int>(i)));
    command.set_tenant(identity.tenant);
    command.set_target_method(follow_up.target_method);
    command.set_request(follow_up.request);
    command.mutable_entity()->set_type(follow_up.entity_type);
    command.mutable_entity()->set_id(follow_up.entity_id);
    command.set_created_at_ms(now);
    // Caused by the span that applied the parent: a cross-shard transfer is one trace.
    if (!identity.trace.traceparent().empty()) *command.mutable_trace() = identity.trace;
    const std::string key = FollowUpKey(identity.tenant, seq, static_cast<uint32_t>(i), slot);
    batch->Put(store_.cf(kFollowUpsCf), key, command.SerializeAsString());
    // Filed under the parent's slot: the credit a debit owes moves with the debit.
    if (slot.has_value()) IndexRow(batch, *slot, kFollowUpsCf, key, /*drop_at_ms=*/0);
  }
  return absl::OkStatus();
}

int64_t Inbox::CountFollowUps() {
  int64_t count = 0;
  std::unique_ptr<rocksdb::Iterator> it = store_.NewIterator(kFollowUpsCf);
  for (it->SeekToFirst(); it->Valid(); it->Next()) ++count;
  return count;
}

absl::StatusOr<v1::PullFollowUpsResponse> Inbox::PullFollowUps(const std::string& tenant,
                                                               int limit) {
  limit = std::clamp(limit <= 0 ? 100 : limit, 1, kMaxFollowUpsPulled);
  // Every entry in the store now is durable once this returns: none is handed out that a
  // power cut could take back with its effect.
  EONCE_RETURN_IF_ERROR(AwaitDurable());
  const std::string prefix = FollowUpKeyPrefix(tenant);
  std::unique_ptr<rocksdb::Iterator> it = store_.NewIterator(kFollowUpsCf);
  v1::PullFollowUpsResponse response;
  for (it->Seek(prefix);
       it->Valid() && it->key().starts_with(prefix) && response.follow_ups_size() < limit;
       it->Next()) {
    // A slot handed off is its owner's to send (an exported copy stays here until the
    // drop; an imported one is not sent until this shard holds the slot).
    FollowUpKeyParts parts;
    if (ParseFollowUpKey(absl::string_view(it->key().data(), it->key().size()), &parts) &&
        parts.slot.has_value() && *parts.slot < kSlotCount && fences_.handed_off(*parts.slot)) {
      continue;
    }
    v1::PendingFollowUp* pending = response.add_follow_ups();
    pending->set_id(it->key().ToString());
    if (!pending->mutable_command()->ParseFromArray(it->value().data(),
                                                    static_cast<int>(it->value().size()))) {
      return Error(absl::StatusCode::kDataLoss, "STORE_CORRUPT", "undecodable follow-up");
    }
  }
  EONCE_RETURN_IF_ERROR(FromRocks(it->status(), "pull follow-ups"));
  return response;
}

absl::StatusOr<v1::AckFollowUpsResponse> Inbox::AckFollowUps(
    const std::string& tenant, const v1::AckFollowUpsRequest& request) {
  if (request.ids_size() > kMaxFollowUpsPulled) {
    return Error(absl::StatusCode::kInvalidArgument, "INVALID_FIELD",
                 absl::StrCat("ids: at most ", kMaxFollowUpsPulled, " a call"));
  }
  const std::string prefix = FollowUpKeyPrefix(tenant);
  absl::MutexLock lock(&ack_mu_);
  rocksdb::WriteBatch batch;
  int64_t acked = 0;
  for (int i = 0; i < request.ids_size(); ++i) {
    if (tenant.empty() || request.ids(i).rfind(prefix, 0) != 0) {
      return Error(absl::StatusCode::kInvalidArgument, "INVALID_FIELD",
                   absl::StrCat("ids[", i, "]: not a follow-up of tenant ", tenant,
                                "; nothing was acknowledged"));
    }
    std::string present;
    rocksdb::Status got = store_.Get(kFollowUpsCf, request.ids(i), &present);
    if (got.IsNotFound()) continue;
    EONCE_RETURN_IF_ERROR(FromRocks(got, "ack follow-ups"));
    batch.Delete(store_.cf(kFollowUpsCf), request.ids(i));
    ++acked;
  }
  // Not synced: an acknowledgement a power cut takes back only makes the relay send the
  // same commands again, which the receivers answer from their records.
  if (acked > 0) EONCE_RETURN_IF_ERROR(store_.Write(&batch, /*sync=*/false, "ack follow-ups"));
  follow_ups_pending_ -= acked;
  v1::AckFollowUpsResponse response;
  response.set_acked(acked);
  return response;
}

}  // namespace eonce
