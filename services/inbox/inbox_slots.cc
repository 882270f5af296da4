// The inbox's slot-scoped data (export, import and drop of a slot's rows) and its
// transactional outbox (follow-ups written with an effect, pulled and acknowledged by a
// relay). See inbox.h.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/big_endian.h"
#include "common/hash.h"
#include "common/slots.h"
#include "common/status.h"
#include "common/ttl.h"
#include "services/inbox/inbox.h"
#include "services/inbox/inbox_internal.h"

namespace eonce {
namespace {

using inbox_internal::kFollowUpsCf;
using inbox_internal::kSlotIndexCf;

std::string SlotPrefix(uint32_t slot) {
  std::string out;
  AppendBigEndian(&out, slot, 2);
  return out;
}

std::string IndexKey(uint32_t slot, const std::string& cf, const std::string& key) {
  return absl::StrCat(SlotPrefix(slot), cf, std::string(1, '\0'), key);
}

absl::Status CheckRange(uint32_t first, uint32_t last) {
  if (first > last || last >= kSlotCount) {
    return Error(absl::StatusCode::kInvalidArgument, "INVALID_FIELD",
                 absl::StrCat("slots ", first, "-", last, ": need first <= last < ", kSlotCount));
  }
  return absl::OkStatus();
}

std::string FollowUpKeyPrefix(const std::string& tenant) {
  return absl::StrCat(tenant, std::string(1, '\0'));
}

}  // namespace

namespace inbox_internal {
RowClaim*& CurrentRowClaim() {
  thread_local RowClaim* claim = nullptr;
  return claim;
}
}  // namespace inbox_internal

StripedLocks::Guard Inbox::LockSlots(uint32_t first, uint32_t last) {
  std::vector<std::string> names;
  for (uint32_t slot = first; slot <= last; ++slot) names.push_back(SlotFences::LockKey(slot));
  std::vector<absl::string_view> keys(names.begin(), names.end());
  return locks_.Lock(keys);
}

void Inbox::IndexRow(rocksdb::WriteBatch* batch, uint32_t slot, const std::string& cf,
                     const std::string& key, int64_t drop_at_ms) {
  batch->Put(store_.cf(kSlotIndexCf), IndexKey(slot, cf, key),
             drop_at_ms == 0 ? std::string() : EncodeFramed(drop_at_ms, 0, ""));
}

void Inbox::PutEntityRow(rocksdb::WriteBatch* batch, const std::string& tenant,
                         absl::string_view entity_type, absl::string_view entity_id,
                         const std::string& cf, const std::string& key, const std::string& value) {
  const uint32_t slot = SlotOf(tenant, entity_type, entity_id);
  if (inbox_internal::RowClaim* claim = inbox_internal::CurrentRowClaim(); claim != nullptr) {
    // Within a Run: only the claimed slot's rows; for a call that claims none, no row of a
    // fenced slot (a call without an epoch, there, is a write of a former owner).
    const bool other_slot = claim->sharded && slot != claim->slot;
    const bool fenced = !claim->sharded && fences_.fence(slot) > 0;
    if (other_slot || fenced) {
      if (claim->refused.empty()) {
        claim->fenced = fenced;
        claim->refused = absl::StrCat(entity_type, "/", entity_id, " is in slot ", slot,
                                      other_slot ? absl::StrCat(", the call is for slot ",
                                                                claim->slot)
                                                 : std::string(", which is fenced"));
      }
      return;
    }
  }
  batch->Put(store_.cf(cf), key, value);
  IndexRow(batch, slot, cf, key, /*drop_at_ms=*/0);
}

absl::StatusOr<v1::ExportSlotDataResponse> Inbox::ExportSlotData(
    const v1::ExportSlotDataRequest& request) {
  EONCE_RETURN_IF_ERROR(CheckRange(request.first_slot(), request.last_slot()));
  const int limit = request.limit() <= 0 ? kMaxSlotRows
                                         : std::min(request.limit(), kMaxSlotRows);
  const std::string end = SlotPrefix(request.last_slot() + 1);
  const int64_t now = clock_.NowMs();
  {
    // First the fence, synced: a write of an older epoch still in flight either committed
    // before it (and is read below) or is refused after it.
    StripedLocks::Guard guard = LockSlots(request.first_slot(), request.last_slot());
    EONCE_RETURN_IF_ERROR(fences_.Raise(request.first_slot(), request.last_slot(),
                                        request.epoch(), "fence slots for export"));
  }
  // Only what is durable leaves: a row a power cut could take back must not be copied.
  EONCE_RETURN_IF_ERROR(AwaitDurable());
  std::shared_ptr<const rocksdb::Snapshot> snapshot = store_.Snapshot();
  std::unique_ptr<rocksdb::Iterator> it = store_.NewIterator(kSlotIndexCf, snapshot.get());
  v1::ExportSlotDataResponse response;
  int scanned = 0;
  size_t bytes = 0;
  it->Seek(request.after().empty() ? SlotPrefix(request.first_slot()) : request.after());
  if (!request.after().empty() && it->Valid() && it->key() == rocksdb::Slice(request.after())) {
    it->Next();
  }
  for (; it->Valid() && it->key().compare(end) < 0; it->Next()) {
    if (response.rows_size() == limit || scanned == kMaxSlotIndexScanned ||
        (bytes >= kMaxSlotDataBytes && response.rows_size() > 0)) {
      return response;  // next_after: the last entry looked at
    }
    ++scanned;
    const std::string index_key = it->key().ToString();
    response.set_next_after(index_key);
    Framed framed;
    if (DecodeFramed(it->value().ToString(), &framed) && framed.DroppedAt(now)) continue;
    const size_t nul = index_key.find('\0', 2);
    if (index_key.size() < 3 || nul == std::string::npos) {
      return Error(absl::StatusCode::kDataLoss, "STORE_CORRUPT", "undecodable slot index entry");
    }
    internal::SlotRow row;
    row.set_slot(static_cast<uint32_t>(ReadBigEndian64(index_key.substr(0, 2))));
    row.set_column_family(index_key.substr(2, nul - 2));
    row.set_key(index_key.substr(nul + 1));
    if (!store_.has_cf(row.column_family())) {
      return Error(absl::StatusCode::kDataLoss, "STORE_CORRUPT",
                   absl::StrCat("slot index names column family ", row.column_family(),
                                ", which this service does not have"));
    }
    std::string value;
    rocksdb::ReadOptions read;
    read.snapshot = snapshot.get();
    rocksdb::Status got = store_.db()->Get(read, store_.cf(row.column_family()), row.key(), &value);
    if (got.IsNotFound()) continue;  // expired and compacted away
    EONCE_RETURN_IF_ERROR(FromRocks(got, "export slot data"));
    row.set_value(std::move(value));
    response.add_rows(row.SerializeAsString());
    bytes += response.rows(response.rows_size() - 1).size();
  }
  EONCE_RETURN_IF_ERROR(FromRocks(it->status(), "export slot data"));
  response.clear_next_after();  // the scan is complete
  return response;
}

absl::StatusOr<v1::ImportSlotDataResponse> Inbox::ImportSlotData(
    const v1::ImportSlotDataRequest& request) {
  EONCE_RETURN_IF_ERROR(CheckRange(request.first_slot(), request.last_slot()));
  if (request.rows_size() > kMaxSlotRows) {
    return Error(absl::StatusCode::kInvalidArgument, "INVALID_FIELD",
                 absl::StrCat("rows: at most ", kMaxSlotRows, " a call"));
  }
  // The fence check and the rows in one batch, under the slots' locks: a copy of an epoch
  // the slots have moved past (the new owner served, or an abort dropped the range) is
  // refused whole.
  StripedLocks::Guard guard = LockSlots(request.first_slot(), request.last_slot());
  rocksdb::WriteBatch batch;
  EONCE_RETURN_IF_ERROR(
      fences_.AdmitRange(request.first_slot(), request.last_slot(), request.epoch(), &batch));
  for (int i = 0; i < request.rows_size(); ++i) {
    internal::SlotRow row;
    auto refuse = [&](const std::string& why) {
      return Error(absl::StatusCode::kInvalidArgument, "INVALID_FIELD",
                   absl::StrCat("rows[", i, "]: ", why, "; nothing was imported"));
    };
    if (!row.ParseFromString(request.rows(i))) return refuse("not a slot row");
    if (row.slot() < request.first_slot() || row.slot() > request.last_slot()) {
      return refuse(absl::StrCat("slot ", row.slot(), " is not in the range"));
    }
    if (!store_.has_cf(row.column_family()) || row.column_family() == kSlotIndexCf ||
        row.column_family() == kFollowUpsCf || row.column_family() == SlotFences::kCf ||
        row.column_family() == "default") {
      return refuse(absl::StrCat("no column family ", row.column_family(), " takes slot rows"));
    }
    // A row at the same key filed under another slot (another tenant's entity that shares
    // the key) would be overwritten: refused.
    std::string existing;
    rocksdb::Status got = store_.Get(row.column_family(), row.key(), &existing);
    if (got.ok() && existing != row.value()) {
      std::string filed;
      if (!store_.Get(kSlotIndexCf, IndexKey(row.slot(), row.column_family(), row.key()), &filed)
               .ok()) {
        return Error(absl::StatusCode::kFailedPrecondition, "ROW_CONFLICT",
                     absl::StrCat("rows[", i, "]: key ", absl::CHexEscape(row.key()), " in ",
                                  row.column_family(),
                                  " holds a row of another slot here; nothing was imported"));
      }
    } else if (!got.ok() && !got.IsNotFound()) {
      return FromRocks(got, "import slot data");
    }
    batch.Put(store_.cf(row.column_family()), row.key(), row.value());
    // An inbox row keeps its expiry in its own frame; its index entry takes the same.
    Framed framed;
    int64_t drop_at = 0;
    if (row.column_family() == inbox_internal::kInboxCf ||
        row.column_family() == inbox_internal::kInboxKeysCf) {
      if (DecodeFramed(row.value(), &framed)) drop_at = framed.drop_at_ms;
    }
    IndexRow(&batch, row.slot(), row.column_family(), row.key(), drop_at);
  }
  if (batch.Count() > 0) EONCE_RETURN_IF_ERROR(WriteSlotRows(&batch, "import slots"));
  fences_.KeepRange(request.first_slot(), request.last_slot(), request.epoch());
  v1::ImportSlotDataResponse response;
  response.set_imported(request.rows_size());
  return response;
}

absl::Status Inbox::WriteSlotRows(rocksdb::WriteBatch* batch, const char* what) {
  absl::Status written = store_.Write(batch, /*sync=*/true, what);
  if (slot_rows_replaced_) slot_rows_replaced_();
  return written;
}

absl::StatusOr<v1::DropSlotDataResponse> Inbox::DropSlotData(
    const v1::DropSlotDataRequest& request) {
  EONCE_RETURN_IF_ERROR(CheckRange(request.first_slot(), request.last_slot()));
  const std::string end = SlotPrefix(request.last_slot() + 1);
  {
    // First the fence, synced: no write of an older epoch lands after the rows are gone.
    StripedLocks::Guard guard = LockSlots(request.first_slot(), request.last_slot());
    EONCE_RETURN_IF_ERROR(fences_.Raise(request.first_slot(), request.last_slot(),
                                        request.epoch(), "fence slots for drop"));
  }
  v1::DropSlotDataResponse response;
  // In batches of bounded size, each synced; a crash between them leaves rows a rerun
  // drops (the drop is idempotent).
  std::string from = SlotPrefix(request.first_slot());
  for (int round = 0; round < 1'000'000; ++round) {
    rocksdb::WriteBatch batch;
    std::unique_ptr<rocksdb::Iterator> it = store_.NewIterator(kSlotIndexCf);
    int in_batch = 0;
    for (it->Seek(from); it->Valid() && it->key().compare(end) < 0 && in_batch < kMaxSlotRows;
         it->Next(), ++in_batch) {
      const std::string index_key = it->key().ToString();
      const size_t nul = index_key.find('\0', 2);
      if (nul != std::string::npos && store_.has_cf(index_key.substr(2, nul - 2))) {
        batch.Delete(store_.cf(index_key.substr(2, nul - 2)), index_key.substr(nul + 1));
      }
      batch.Delete(store_.cf(kSlotIndexCf), index_key);
      from = index_key;
    }
    EONCE_RETURN_IF_ERROR(FromRocks(it->status(), "drop slot data"));
    if (in_batch == 0) break;
    EONCE_RETURN_IF_ERROR(WriteSlotRows(&batch, "drop slots"));
    response.set_dropped(response.dropped() + in_batch);
  }
  return response;
}

std::string Inbox::FollowUpCommandId(const std::string& tenant, const std::string& parent_id,
                                     int index) {
  std::string material = absl::StrCat("eonce.follow_up.v1", std::string(1, '\0'), tenant,
                                      std::string(1, '\0'), parent_id, std::string(1, '\0'),
                                      index);
  return absl::StrCat("fu-", absl::BytesToHexString(Sha256(material).substr(0, 20)));
}

absl::Status Inbox::WriteFollowUps(const CallIdentity& identity, uint64_t seq,
                                   const Applied& applied, rocksdb::WriteBatch* batch) {
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
    std::string key = FollowUpKeyPrefix(identity.tenant);
    AppendBigEndian(&key, seq, 8);
    AppendBigEndian(&key, i, 2);
    batch->Put(store_.cf(kFollowUpsCf), key, command.SerializeAsString());
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
