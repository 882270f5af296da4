#include "dedupe_sidecar/sharding/slot_transfer.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/log.h"
#include "common/base/status.h"

namespace eonce {

namespace {

int64_t Deadline(const BusinessSlots& business) {
  return business.clock.NowMs() + business.timeout_ms;
}

// A page of the business's rows, after the records, at `epoch`: the map's that CheckExport
// found the run frozen in. Not the gate's epoch read again: had the gate adopted the
// abort's map meanwhile, the business would hand the run off at the epoch that gives it
// back here, and refuse this shard's own writes of it.
absl::StatusOr<v1::ExportSlotsResponse> ExportBusinessRows(uint64_t epoch,
                                                           const v1::ExportSlotsRequest& request,
                                                           BusinessSlots* business) {
  v1::ExportSlotsResponse response;
  response.set_epoch(epoch);
  if (business == nullptr) return response;  // nothing after the records
  v1::ExportSlotDataRequest page;
  page.set_first_slot(request.first_slot());
  page.set_last_slot(request.last_slot());
  page.set_after(request.after().substr(1));
  page.set_limit(request.limit());
  // The business fences the slots at the epoch of the map that froze them, before it reads.
  page.set_epoch(response.epoch());
  absl::StatusOr<v1::ExportSlotDataResponse> rows =
      business->upstream.ExportSlotData(page, Deadline(*business));
  if (rows.status().code() == absl::StatusCode::kUnimplemented) return response;
  if (!rows.ok()) {
    return Error(absl::StatusCode::kUnavailable, "BUSINESS_SLOT_DATA",
                 absl::StrCat("the business's slot data: ", rows.status().message()));
  }
  *response.mutable_business_rows() = std::move(*rows->mutable_rows());
  if (!rows->next_after().empty()) {
    response.set_next_after(absl::StrCat(std::string(1, kBusinessCursor), rows->next_after()));
  }
  return response;
}

}  // namespace

absl::StatusOr<v1::ExportSlotsResponse> ExportSlots(ShardGate& shards, RecordStore& records,
                                                    const v1::ExportSlotsRequest& request,
                                                    BusinessSlots* business) {
  const uint32_t first = request.first_slot(), last = request.last_slot();
  EONCE_ASSIGN_OR_RETURN(const uint64_t epoch, shards.CheckExport(first, last));
  if (!request.after().empty() && request.after()[0] == kBusinessCursor) {
    EONCE_ASSIGN_OR_RETURN(v1::ExportSlotsResponse response,
                           ExportBusinessRows(epoch, request, business));
    EONCE_RETURN_IF_ERROR(shards.CheckExport(first, last).status());
    return response;
  }
  const int limit = request.limit() <= 0 ? kMaxExportRecords
                                         : std::min(request.limit(), kMaxExportRecords);
  EONCE_ASSIGN_OR_RETURN(RecordStore::SlotPage page,
                         records.ExportSlots(first, last, request.after(), limit,
                                             kMaxExportBytes));
  v1::ExportSlotsResponse response;
  for (const Record& record : page.records) response.add_records(record.SerializeAsString());
  response.set_next_after(page.next_after);
  // Past the last record: the business's rows next.
  if (page.next_after.empty() && business != nullptr) {
    response.set_next_after(std::string(1, kBusinessCursor));
  }
  response.set_unplaced(page.unplaced);
  response.set_epoch(epoch);
  // Checked again after the scan: had the map changed meanwhile, the page could miss a
  // write.
  EONCE_RETURN_IF_ERROR(shards.CheckExport(first, last).status());
  return response;
}

absl::StatusOr<v1::ImportSlotsResponse> ImportSlots(ShardGate& shards, RecordStore& records,
                                                    const v1::ImportSlotsRequest& request,
                                                    BusinessSlots* business) {
  const uint32_t first = request.first_slot(), last = request.last_slot();
  // Held until the rows and records are written: the flip cannot be adopted in between.
  EONCE_ASSIGN_OR_RETURN(ShardGate::TransferHold hold,
                         shards.HoldImport(first, last, request.epoch()));
  if (request.records_size() > kMaxExportRecords) {
    return absl::InvalidArgumentError(
        absl::StrCat("records: at most ", kMaxExportRecords, " a call"));
  }
  std::vector<Record> imported(request.records_size());
  for (int i = 0; i < request.records_size(); ++i) {
    std::optional<uint32_t> slot;
    if (imported[i].ParseFromString(request.records(i))) slot = SlotOfRecord(imported[i]);
    if (!slot.has_value() || *slot < first || *slot > last) {
      return Error(absl::StatusCode::kInvalidArgument, "INVALID_FIELD",
                   absl::StrCat("records[", i, "]: not a record of slots ", first, "-", last,
                                "; nothing was imported"));
    }
  }
  v1::ImportSlotsResponse response;
  if (request.business_rows_size() > 0) {
    if (business == nullptr) {
      return Error(absl::StatusCode::kFailedPrecondition, "BUSINESS_SLOT_DATA",
                   "business rows for a sidecar whose business keeps no slot data here");
    }
    v1::ImportSlotDataRequest rows;
    rows.set_first_slot(first);
    rows.set_last_slot(last);
    rows.set_epoch(shards.map()->epoch());
    *rows.mutable_rows() = request.business_rows();
    absl::StatusOr<v1::ImportSlotDataResponse> written =
        business->upstream.ImportSlotData(rows, Deadline(*business));
    if (!written.ok()) {
      // A refusal of the rows (ROW_CONFLICT) keeps its code and reason: the move cannot
      // go on until an operator acts. Anything else is the business being unreachable.
      const bool refused = written.status().code() == absl::StatusCode::kFailedPrecondition ||
                           written.status().code() == absl::StatusCode::kInvalidArgument;
      const std::string reason = ReasonOf(written.status());
      return Error(refused ? written.status().code() : absl::StatusCode::kUnavailable,
                   reason.empty() ? "BUSINESS_SLOT_DATA" : reason,
                   absl::StrCat("the business's slot data: ", written.status().message()));
    }
    response.set_imported_rows(written->imported());
  }
  EONCE_RETURN_IF_ERROR(records.Import(imported));
  response.set_imported(static_cast<int64_t>(imported.size()));
  return response;
}

absl::StatusOr<v1::DropSlotsResponse> DropSlots(ShardGate& shards, RecordStore& records,
                                                const v1::DropSlotsRequest& request,
                                                BusinessSlots* business) {
  EONCE_ASSIGN_OR_RETURN(
      ShardGate::TransferHold hold,
      shards.HoldDrop(request.first_slot(), request.last_slot(), request.epoch()));
  EONCE_ASSIGN_OR_RETURN(int64_t dropped,
                         records.DropSlots(request.first_slot(), request.last_slot()));
  LogInfo("slot records dropped",
          {{"slots", absl::StrCat(request.first_slot(), "-", request.last_slot())},
           {"records", absl::StrCat(dropped)}});
  v1::DropSlotsResponse response;
  response.set_dropped(dropped);
  if (business != nullptr) {
    v1::DropSlotDataRequest rows;
    rows.set_first_slot(request.first_slot());
    rows.set_last_slot(request.last_slot());
    rows.set_epoch(shards.map()->epoch());
    absl::StatusOr<v1::DropSlotDataResponse> gone =
        business->upstream.DropSlotData(rows, Deadline(*business));
    if (!gone.ok() && gone.status().code() != absl::StatusCode::kUnimplemented) {
      return Error(absl::StatusCode::kUnavailable, "BUSINESS_SLOT_DATA",
                   absl::StrCat("the business's slot data: ", gone.status().message()));
    }
    if (gone.ok()) response.set_dropped_rows(gone->dropped());
  }
  return response;
}

absl::Status HoldBusinessSlots(const SlotMap& map, const std::string& shard,
                               BusinessSlots& business, int64_t deadline_ms) {
  auto held = [&](uint32_t slot) { return map.OwnerOf(slot) == shard && !map.Migrating(slot); };
  for (uint32_t first = 0; first < kSlotCount; ++first) {
    if (!held(first)) continue;
    uint32_t last = first;
    while (last + 1 < kSlotCount && held(last + 1)) ++last;
    v1::HoldSlotDataRequest run;
    run.set_first_slot(first);
    run.set_last_slot(last);
    run.set_epoch(map.epoch());
    absl::StatusOr<v1::HoldSlotDataResponse> answer =
        business.upstream.HoldSlotData(run, deadline_ms);
    if (answer.status().code() == absl::StatusCode::kUnimplemented) return absl::OkStatus();
    if (!answer.ok()) {
      return Error(absl::StatusCode::kUnavailable, "BUSINESS_SLOT_DATA",
                   absl::StrCat("holding slots ", first, "-", last, " at epoch ", map.epoch(),
                                " in the business: ", answer.status().message()));
    }
    if (answer->held() > 0) {
      LogInfo("the business holds slots again",
              {{"slots", absl::StrCat(first, "-", last)},
               {"epoch", absl::StrCat(map.epoch())},
               {"taken", absl::StrCat(answer->held())}});
    }
    first = last;
  }
  return absl::OkStatus();
}

}  // namespace eonce
