// The inbox's slot-scoped data: rows filed by slot, and their export, import and drop.
// See inbox.h.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/base/big_endian.h"
#include "common/base/hash.h"
#include "common/coord/slots.h"
#include "common/base/status.h"
#include "common/store/ttl.h"
#include "services/inbox/inbox.h"
#include "services/inbox/inbox_internal.h"

namespace eonce {
namespace {

using inbox_internal::FollowUpKey;
using inbox_internal::FollowUpKeyParts;
using inbox_internal::kEffectsCf;
using inbox_internal::kFollowUpsCf;
using inbox_internal::kSlotImportsCf;
using inbox_internal::kSlotIndexCf;
using inbox_internal::ParseFollowUpKey;
using inbox_internal::SeqKey;

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
  PutSlotRow(batch, SlotOf(tenant, entity_type, entity_id), cf, key, value);
}

void Inbox::PutSlotRow(rocksdb::WriteBatch* batch, uint32_t slot, const std::string& cf,
                       const std::string& key, const std::string& value) {
  if (inbox_internal::RowClaim* claim = inbox_internal::CurrentRowClaim(); claim != nullptr) {
    // Within a Run: only the claimed slot's rows; for a call that claims none, no row of a
    // fenced slot (a call without an epoch, there, is a write of a former owner).
    const bool other_slot = claim->sharded && slot != claim->slot;
    const bool fenced = !claim->sharded && fences_.fence(slot) > 0;
    if (other_slot || fenced) {
      if (claim->refused.empty()) {
        claim->fenced = fenced;
        claim->refused = absl::StrCat("row ", absl::CHexEscape(key), " of ", cf, " is in slot ",
                                      slot,
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
    if (row.column_family() == kSlotImportsCf) continue;  // this store's own bookkeeping
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
  // Sequence numbers taken for imported effects and follow-ups, given back once the batch
  // is written (or will never be).
  std::vector<uint64_t> seqs;
  struct Release {
    Inbox* inbox;
    std::vector<uint64_t>* seqs;
    ~Release() {
      for (uint64_t seq : *seqs) inbox->ReleaseSeq(seq);
    }
  } release{this, &seqs};
  int64_t follow_ups = 0;
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
        row.column_family() == kSlotImportsCf || row.column_family() == SlotFences::kCf ||
        row.column_family() == "default") {
      return refuse(absl::StrCat("no column family ", row.column_family(), " takes slot rows"));
    }
    if (row.column_family() == kEffectsCf || row.column_family() == kFollowUpsCf) {
      // Keyed by the source's sequence numbers: written under this store's.
      absl::Status logged = ImportLogRow(row, &batch, &seqs, &follow_ups);
      if (!logged.ok()) {
        return absl::Status(logged.code(), absl::StrCat("rows[", i, "]: ", logged.message(),
                                                        "; nothing was imported"));
      }
      continue;
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
  follow_ups_pending_ += follow_ups;
  v1::ImportSlotDataResponse response;
  response.set_imported(request.rows_size());
  return response;
}

absl::Status Inbox::ImportLogRow(const internal::SlotRow& row, rocksdb::WriteBatch* batch,
                                 std::vector<uint64_t>* seqs, int64_t* follow_ups) {
  // The same row again (a retried page, a second copy of the move) is the same import.
  const std::string marker =
      absl::StrCat(row.column_family(), std::string(1, '\0'), Sha256(row.value()));
  std::string written;
  rocksdb::Status got = store_.Get(kSlotImportsCf, marker, &written);
  if (got.ok()) return absl::OkStatus();
  if (!got.IsNotFound()) return FromRocks(got, "import slot data");
  const uint64_t seq = TakeSeq();
  seqs->push_back(seq);
  std::string key;
  std::string value = row.value();
  if (row.column_family() == kEffectsCf) {
    v1::Effect effect;
    if (!effect.ParseFromString(value)) {
      return Error(absl::StatusCode::kInvalidArgument, "INVALID_FIELD", "not an effect");
    }
    effect.set_seq(seq);
    effect.set_slot(row.slot());
    key = SeqKey(seq);
    value = effect.SerializeAsString();
  } else {
    FollowUpKeyParts parts;
    if (!ParseFollowUpKey(row.key(), &parts)) {
      return Error(absl::StatusCode::kInvalidArgument, "INVALID_FIELD", "not a follow-up key");
    }
    key = FollowUpKey(parts.tenant, seq, parts.index, row.slot());
    ++*follow_ups;
  }
  batch->Put(store_.cf(row.column_family()), key, value);
  IndexRow(batch, row.slot(), row.column_family(), key, /*drop_at_ms=*/0);
  batch->Put(store_.cf(kSlotImportsCf), marker, key);
  IndexRow(batch, row.slot(), kSlotImportsCf, marker, /*drop_at_ms=*/0);
  return absl::OkStatus();
}

absl::Status Inbox::WriteSlotRows(rocksdb::WriteBatch* batch, const char* what) {
  absl::Status written = store_.Write(batch, /*sync=*/true, what);
  if (slot_rows_replaced_) slot_rows_replaced_();
  return written;
}

absl::StatusOr<v1::HoldSlotDataResponse> Inbox::HoldSlotData(
    const v1::HoldSlotDataRequest& request) {
  EONCE_RETURN_IF_ERROR(CheckRange(request.first_slot(), request.last_slot()));
  StripedLocks::Guard guard = LockSlots(request.first_slot(), request.last_slot());
  EONCE_ASSIGN_OR_RETURN(int64_t held,
                         fences_.Hold(request.first_slot(), request.last_slot(), request.epoch()));
  v1::HoldSlotDataResponse response;
  response.set_held(held);
  return response;
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
    int64_t follow_ups = 0;
    // Follow-ups deleted here are counted once: AckFollowUps deletes under the same lock.
    absl::MutexLock ack_lock(&ack_mu_);
    for (it->Seek(from); it->Valid() && it->key().compare(end) < 0 && in_batch < kMaxSlotRows;
         it->Next(), ++in_batch) {
      const std::string index_key = it->key().ToString();
      const size_t nul = index_key.find('\0', 2);
      const std::string cf = nul == std::string::npos ? "" : index_key.substr(2, nul - 2);
      if (nul != std::string::npos && store_.has_cf(cf)) {
        std::string present;
        if (cf == kFollowUpsCf && store_.Get(cf, index_key.substr(nul + 1), &present).ok()) {
          ++follow_ups;
        }
        batch.Delete(store_.cf(cf), index_key.substr(nul + 1));
      }
      batch.Delete(store_.cf(kSlotIndexCf), index_key);
      from = index_key;
    }
    EONCE_RETURN_IF_ERROR(FromRocks(it->status(), "drop slot data"));
    if (in_batch == 0) break;
    EONCE_RETURN_IF_ERROR(WriteSlotRows(&batch, "drop slots"));
    follow_ups_pending_ -= follow_ups;
    response.set_dropped(response.dropped() + in_batch);
  }
  return response;
}

}  // namespace eonce
