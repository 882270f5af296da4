#include "dedupe_sidecar/slot_transfer.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/status.h"

namespace eonce {

absl::StatusOr<v1::ExportSlotsResponse> ExportSlots(ShardGate& shards, RecordStore& records,
                                                    const v1::ExportSlotsRequest& request) {
  const uint32_t first = request.first_slot(), last = request.last_slot();
  EONCE_RETURN_IF_ERROR(shards.CheckExport(first, last));
  const int limit = request.limit() <= 0 ? kMaxExportRecords
                                         : std::min(request.limit(), kMaxExportRecords);
  EONCE_ASSIGN_OR_RETURN(RecordStore::SlotPage page,
                         records.ExportSlots(first, last, request.after(), limit,
                                             kMaxExportBytes));
  v1::ExportSlotsResponse response;
  for (const Record& record : page.records) response.add_records(record.SerializeAsString());
  response.set_next_after(page.next_after);
  response.set_unplaced(page.unplaced);
  response.set_epoch(shards.map()->epoch());
  // Checked again after the scan: had the map changed meanwhile, the page could miss a
  // write.
  EONCE_RETURN_IF_ERROR(shards.CheckExport(first, last));
  return response;
}

absl::StatusOr<v1::ImportSlotsResponse> ImportSlots(ShardGate& shards, RecordStore& records,
                                                    const v1::ImportSlotsRequest& request) {
  const uint32_t first = request.first_slot(), last = request.last_slot();
  EONCE_RETURN_IF_ERROR(shards.CheckImport(first, last));
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
  EONCE_RETURN_IF_ERROR(records.Import(imported));
  v1::ImportSlotsResponse response;
  response.set_imported(static_cast<int64_t>(imported.size()));
  return response;
}

absl::StatusOr<v1::DropSlotsResponse> DropSlots(ShardGate& shards, RecordStore& records,
                                                const v1::DropSlotsRequest& request) {
  EONCE_RETURN_IF_ERROR(shards.CheckDrop(request.first_slot(), request.last_slot()));
  EONCE_ASSIGN_OR_RETURN(int64_t dropped,
                         records.DropSlots(request.first_slot(), request.last_slot()));
  LogInfo("slot records dropped",
          {{"slots", absl::StrCat(request.first_slot(), "-", request.last_slot())},
           {"records", absl::StrCat(dropped)}});
  v1::DropSlotsResponse response;
  response.set_dropped(dropped);
  return response;
}

}  // namespace eonce
