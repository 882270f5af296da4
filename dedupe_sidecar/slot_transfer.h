// A move's steps on one sharded sidecar (SidecarAdmin.ExportSlots, ImportSlots,
// DropSlots): each checked against the map the slot gate holds, then done on the record
// store. The gRPC admin service and the simulation both call these.
#ifndef EONCE_DEDUPE_SIDECAR_SLOT_TRANSFER_H_
#define EONCE_DEDUPE_SIDECAR_SLOT_TRANSFER_H_

#include "absl/status/statusor.h"
#include "dedupe_sidecar/record_store.h"
#include "dedupe_sidecar/shard_gate.h"
#include "eonce/v1/sidecar.pb.h"

namespace eonce {

// Per call of ExportSlots: records, and bytes (what fits a message with room to spare).
inline constexpr int kMaxExportRecords = 1000;
inline constexpr size_t kMaxExportBytes = 2 << 20;

// A page of the records of slots moving away from this shard, once no work runs on them.
absl::StatusOr<v1::ExportSlotsResponse> ExportSlots(ShardGate& shards, RecordStore& records,
                                                    const v1::ExportSlotsRequest& request);
// Writes exported records of slots moving to this shard (synced); nothing if one of them
// is not a record of the range.
absl::StatusOr<v1::ImportSlotsResponse> ImportSlots(ShardGate& shards, RecordStore& records,
                                                    const v1::ImportSlotsRequest& request);
// Deletes the records of slots this shard neither owns nor receives.
absl::StatusOr<v1::DropSlotsResponse> DropSlots(ShardGate& shards, RecordStore& records,
                                                const v1::DropSlotsRequest& request);

}  // namespace eonce

#endif  // EONCE_DEDUPE_SIDECAR_SLOT_TRANSFER_H_
