// A move's steps on one sharded sidecar (SidecarAdmin.ExportSlots, ImportSlots,
// DropSlots): each checked against the map the slot gate holds, then done on the record
// store. The gRPC admin service and the simulation both call these.
#ifndef EONCE_DEDUPE_SIDECAR_SHARDING_SLOT_TRANSFER_H_
#define EONCE_DEDUPE_SIDECAR_SHARDING_SLOT_TRANSFER_H_

#include "absl/status/statusor.h"
#include "dedupe_sidecar/store/record_store.h"
#include "common/base/clock.h"
#include "dedupe_sidecar/sharding/shard_gate.h"
#include "dedupe_sidecar/upstream/upstream.h"
#include "eonce/v1/sidecar.pb.h"

namespace eonce {

// Per call of ExportSlots: records, and bytes (what fits a message with room to spare).
inline constexpr int kMaxExportRecords = 1000;
inline constexpr size_t kMaxExportBytes = 2 << 20;

// The business behind this sidecar, whose data by slot (eonce.v1.SlotData) moves with
// the records; a business that answers UNIMPLEMENTED keeps none. Null where the business
// is not per shard (the simulation's).
struct BusinessSlots {
  Upstream& upstream;
  Clock& clock;
  int64_t timeout_ms = 30'000;  // per call
};

// The first byte of an export cursor that is past the records, in the business's rows
// (a record key, which starts with a tenant name, never starts with it).
inline constexpr char kBusinessCursor = '\xff';

// A page of the records of slots moving away from this shard, once no work runs on them;
// after the last page of records, pages of the business's rows of those slots.
absl::StatusOr<v1::ExportSlotsResponse> ExportSlots(ShardGate& shards, RecordStore& records,
                                                    const v1::ExportSlotsRequest& request,
                                                    BusinessSlots* business = nullptr);
// Writes exported business rows, then records, of slots moving to this shard (synced);
// nothing if one of them is not of the range.
absl::StatusOr<v1::ImportSlotsResponse> ImportSlots(ShardGate& shards, RecordStore& records,
                                                    const v1::ImportSlotsRequest& request,
                                                    BusinessSlots* business = nullptr);
// Deletes the records, and the business's rows, of slots this shard neither owns nor
// receives.
absl::StatusOr<v1::DropSlotsResponse> DropSlots(ShardGate& shards, RecordStore& records,
                                                const v1::DropSlotsRequest& request,
                                                BusinessSlots* business = nullptr);
// Tells the business which slots `shard` holds at `map` (adopted, drained and acknowledged):
// HoldSlotData for each run of slots the map gives it, not migrating, each bounded by
// `deadline_ms`. The business counts those slots and relays their follow-ups again where an
// export or an import had handed them off (an abort gave the run back; the flip gave it
// here). OK for a business that keeps no slot data; UNAVAILABLE BUSINESS_SLOT_DATA at the
// first run that fails (the caller tries again later; the hold repeats harmlessly).
absl::Status HoldBusinessSlots(const SlotMap& map, const std::string& shard,
                               BusinessSlots& business, int64_t deadline_ms);

}  // namespace eonce

#endif  // EONCE_DEDUPE_SIDECAR_SHARDING_SLOT_TRANSFER_H_
