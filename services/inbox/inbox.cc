#include "services/inbox/inbox.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/base/big_endian.h"
#include "common/command/command.h"
#include "common/rpc/error_details.h"
#include "common/coord/slots.h"
#include "common/base/status.h"
#include "common/command/trace_context.h"
#include "services/inbox/inbox_internal.h"

namespace eonce {
namespace {

using inbox_internal::InboxKey;
using inbox_internal::kEffectsCf;
using inbox_internal::kFollowUpsCf;
using inbox_internal::kInboxCf;
using inbox_internal::kInboxKeysCf;
using inbox_internal::kSlotIndexCf;
using inbox_internal::SeqKey;
using inbox_internal::SeqOfKey;

// Reads a framed value (TTL) into `message`; nullopt when absent or expired. A value
// written before values were framed never expires.
template <typename Message>
absl::StatusOr<std::optional<Message>> GetFramed(RocksStore& store, const char* cf,
                                                 const std::string& key, int64_t now_ms) {
  std::string value;
  rocksdb::Status status = store.Get(cf, key, &value);
  if (status.IsNotFound()) return std::optional<Message>();
  EONCE_RETURN_IF_ERROR(FromRocks(status, "inbox lookup"));
  Message message;
  Framed framed;
  if (ParseFramed(value, &message, &framed)) {
    if (framed.DroppedAt(now_ms)) return std::optional<Message>();
    return std::optional<Message>(std::move(message));
  }
  if (!message.ParseFromString(value)) {
    return Error(absl::StatusCode::kDataLoss, "STORE_CORRUPT", "undecodable inbox entry");
  }
  return std::optional<Message>(std::move(message));
}

absl::Status SlotMismatch(const std::string& type, const std::string& id, uint32_t entity_slot,
                          uint32_t claimed) {
  return Error(absl::StatusCode::kFailedPrecondition, "ENTITY_SLOT_MISMATCH",
               absl::StrCat("entity ", type, "/", id, " is in slot ", entity_slot,
                            ", the call is for slot ", claimed, "; nothing was applied"));
}

// The sidecar's answer to the same mistakes (Deduper::CheckOwner).
absl::Status KeyConflict(const char* reason, const char* why) {
  return Error(absl::StatusCode::kAlreadyExists, reason,
               absl::StrCat(why, " (found by the business's inbox); nothing was applied"));
}

// A key's owner: the same command id and, where both are known, the same payload.
absl::Status CheckKeyOwner(const std::string& command_id, const std::string& payload_sha256,
                           const CallIdentity& identity) {
  if (!payload_sha256.empty() && !identity.payload_sha256.empty() &&
      payload_sha256 != identity.payload_sha256) {
    return KeyConflict("IDEMPOTENCY_CONFLICT",
                       "this idempotency key was used with a different payload");
  }
  if (command_id != identity.command_id) {
    return KeyConflict("KEY_REUSED", "this idempotency key belongs to another command id");
  }
  return absl::OkStatus();
}

// The TTL filter of the inbox column family, owning its counters.
class InboxTtlFilter : public rocksdb::CompactionFilterFactory {
 public:
  explicit InboxTtlFilter(Clock& clock) : inner_(clock, nullptr, stats_) {}
  std::unique_ptr<rocksdb::CompactionFilter> CreateCompactionFilter(
      const rocksdb::CompactionFilter::Context& context) override {
    return inner_.CreateCompactionFilter(context);
  }
  const char* Name() const override { return "eonce.InboxTtlFilter"; }

 private:
  TtlStats stats_;
  TtlCompactionFilterFactory inner_;
};

}  // namespace

std::vector<ColumnFamilySpec> Inbox::ColumnFamilies(Clock& clock) {
  ColumnFamilySpec inbox{kInboxCf, {}};
  inbox.options.compaction_filter_factory = std::make_shared<InboxTtlFilter>(clock);
  ColumnFamilySpec keys{kInboxKeysCf, {}};
  keys.options.compaction_filter_factory = std::make_shared<InboxTtlFilter>(clock);
  ColumnFamilySpec index{kSlotIndexCf, {}};
  index.options.compaction_filter_factory = std::make_shared<InboxTtlFilter>(clock);
  // Scanned: a slot's rows, the effects after a number, a tenant's follow-ups.
  index.lookups_miss = false;
  ColumnFamilySpec effects{kEffectsCf, {}};
  effects.lookups_miss = false;
  ColumnFamilySpec follow_ups{kFollowUpsCf, {}};
  follow_ups.lookups_miss = false;
  ColumnFamilySpec fences{SlotFences::kCf, {}};
  fences.lookups_miss = false;
  ColumnFamilySpec imports{inbox_internal::kSlotImportsCf, {}};
  return {inbox, keys, index, effects, follow_ups, fences, imports};
}

StoreOptions Inbox::StoreOptionsFor(StoreOptions base) {
  base.buffer_log_until_sync = true;
  return base;
}

Inbox::Inbox(RocksStore& store, Clock& clock, bool legacy_mode, FaultInjector* faults,
             int64_t entry_retention_ms)
    : store_(store),
      clock_(clock),
      legacy_mode_(legacy_mode),
      faults_(faults),
      fences_(store),
      entry_retention_ms_(entry_retention_ms) {
  std::unique_ptr<rocksdb::Iterator> it = store_.NewIterator(kEffectsCf);
  it->SeekToLast();
  {
    absl::MutexLock lock(&seq_mu_);
    if (it->Valid()) next_effect_seq_ = SeqOfKey(it->key()) + 1;
  }
  follow_ups_pending_ = CountFollowUps();
}

uint64_t Inbox::TakeSeq() {
  absl::MutexLock lock(&seq_mu_);
  uint64_t seq = next_effect_seq_++;
  uncommitted_seqs_.insert(seq);
  return seq;
}

void Inbox::ReleaseSeq(uint64_t seq) {
  absl::MutexLock lock(&seq_mu_);
  uncommitted_seqs_.erase(seq);
}

absl::StatusOr<std::optional<internal::InboxEntry>> Inbox::Lookup(
    const std::string& tenant, const std::string& command_id) {
  return GetFramed<internal::InboxEntry>(store_, kInboxCf, InboxKey(tenant, command_id),
                                         clock_.NowMs());
}

absl::Status Inbox::AwaitDurable() {
  absl::Notification done;
  absl::Status durable;
  WhenDurable([&](absl::Status status) {
    durable = std::move(status);
    done.Notify();
  });
  done.WaitForNotification();
  return durable;
}

absl::StatusOr<v1::CallResult> Inbox::Run(const CallIdentity& identity,
                                          std::initializer_list<absl::string_view> entities,
                                          const ApplyFn& apply) {
  EONCE_ASSIGN_OR_RETURN(Ran ran, RunLocked(identity, entities, apply));
  // Outside the locks: the effect and its inbox entry (or the entry a repeat found) must
  // be durable before the answer leaves. Calls that wait together share one fsync, and a
  // call that read this one's state is later in the log, so its sync covers this write.
  if ((ran.wrote || ran.repeat) && !identity.durability_by_caller) {
    EONCE_RETURN_IF_ERROR(AwaitDurable());
  }
  EONCE_RETURN_IF_ERROR(HitFault(faults_, FaultPoint::kAfterApplyBeforeResponse));
  return std::move(ran.result);
}

absl::StatusOr<Inbox::Ran> Inbox::RunLocked(const CallIdentity& identity,
                                            std::initializer_list<absl::string_view> entities,
                                            const ApplyFn& apply) {
  const bool dedupe = !legacy_mode_ && !identity.command_id.empty();
  const bool owns_key = dedupe && !identity.idempotency_key.empty();
  std::string inbox_key = InboxKey(identity.tenant, identity.command_id);
  const std::string owner_key =
      owns_key ? InboxKey(identity.tenant, identity.idempotency_key) : std::string();
  // The lock set is the command, its key and every entity, taken in one call, in stripe
  // order (the key's name is prefixed apart from the command's).
  const std::string owner_lock = owns_key ? absl::StrCat("key:", owner_key) : std::string();
  // The entity's slot (its entries are filed under it), and the slot whose fence the call
  // meets: the one it claims, else its entity's.
  const bool placed = !identity.entity_type.empty();
  const uint32_t entity_slot =
      placed ? SlotOf(identity.tenant, identity.entity_type, identity.entity_id) : 0;
  const bool sharded = identity.slot_epoch > 0;
  if (sharded && identity.slot >= kSlotCount) {
    return Error(absl::StatusCode::kInvalidArgument, "INVALID_FIELD",
                 absl::StrCat("slot ", identity.slot, ": need < ", kSlotCount));
  }
  if (sharded && placed && entity_slot != identity.slot) {
    return SlotMismatch(identity.entity_type, identity.entity_id, entity_slot, identity.slot);
  }
  const bool fenced_slot = sharded || placed;
  const uint32_t slot = sharded ? identity.slot : entity_slot;
  const std::string slot_lock = fenced_slot ? SlotFences::LockKey(slot) : std::string();
  std::vector<absl::string_view> keys(entities);
  keys.push_back(inbox_key);
  if (owns_key) keys.push_back(owner_lock);
  if (fenced_slot) keys.push_back(slot_lock);
  StripedLocks::Guard guard = locks_.Lock(keys);
  Ran ran;

  // Under the slot's lock until the batch is written: an export or drop that raises the
  // fence waits for this write, or this call sees the raised fence and writes nothing.
  rocksdb::WriteBatch batch;
  uint64_t fence_after = 0;
  if (fenced_slot) {
    EONCE_ASSIGN_OR_RETURN(fence_after, fences_.Admit(slot, identity.slot_epoch, &batch));
  }

  if (owns_key) {
    EONCE_ASSIGN_OR_RETURN(auto owner, GetFramed<internal::InboxKeyOwner>(
                                           store_, kInboxKeysCf, owner_key, clock_.NowMs()));
    if (owner.has_value()) {
      EONCE_RETURN_IF_ERROR(CheckKeyOwner(owner->command_id(), owner->payload_sha256(), identity));
    }
  }
  if (dedupe) {
    EONCE_ASSIGN_OR_RETURN(auto stored, Lookup(identity.tenant, identity.command_id));
    if (stored.has_value()) {
      // The command came back with another payload: refused. (Under another key it is
      // still the same command, and gets its stored answer.)
      EONCE_RETURN_IF_ERROR(CheckKeyOwner(identity.command_id, stored->payload_sha256(), identity));
      repeats_++;
      ran.repeat = true;
      ran.result = stored->result();
      return ran;
    }
  }

  uint64_t seq = TakeSeq();
  struct Release {
    Inbox* inbox;
    uint64_t seq;
    ~Release() { inbox->ReleaseSeq(seq); }
  } release{this, seq};
  inbox_internal::RowClaim claim{sharded, identity.slot, {}, false};
  inbox_internal::CurrentRowClaim() = &claim;
  absl::StatusOr<Applied> applied_or = apply(&batch, seq);
  inbox_internal::CurrentRowClaim() = nullptr;
  if (!claim.refused.empty()) {
    return Error(absl::StatusCode::kFailedPrecondition,
                 claim.fenced ? kSlotFencedReason : "ENTITY_SLOT_MISMATCH",
                 absl::StrCat(claim.refused, "; nothing was applied"));
  }
  EONCE_ASSIGN_OR_RETURN(Applied applied, std::move(applied_or));
  int64_t now = clock_.NowMs();
  if (!applied.effect.has_value()) seq = 0;
  if (applied.effect.has_value()) {
    v1::Effect& effect = *applied.effect;
    effect.set_seq(seq);
    effect.set_command_id(identity.command_id);
    effect.set_tenant(identity.tenant);
    effect.set_applied_at_ms(now);
    effect.set_trace_id(TraceIdOf(identity.trace));
    effect.set_span_id(SpanIdOf(identity.trace));
    // Filed under its call's entity's slot, with its follow-ups: they move with the slot.
    if (placed) effect.set_slot(entity_slot);
    batch.Put(store_.cf(kEffectsCf), SeqKey(seq), effect.SerializeAsString());
    if (placed) IndexRow(&batch, entity_slot, kEffectsCf, SeqKey(seq), /*drop_at_ms=*/0);
  }
  EONCE_RETURN_IF_ERROR(WriteFollowUps(identity, seq, applied, &batch,
                                       placed ? std::optional<uint32_t>(entity_slot)
                                              : std::nullopt));
  // The entries of a call whose entity is known are filed under its slot, to move with it.
  const int64_t drop_at = now + entry_retention_ms_;
  if (dedupe) {
    internal::InboxEntry entry;
    *entry.mutable_result() = applied.result;
    entry.set_applied_at_ms(now);
    entry.set_effect_seq(seq);
    entry.set_idempotency_key(identity.idempotency_key);
    entry.set_payload_sha256(identity.payload_sha256);
    batch.Put(store_.cf(kInboxCf), inbox_key, EncodeFramed(drop_at, 0, entry.SerializeAsString()));
    if (placed) IndexRow(&batch, entity_slot, kInboxCf, inbox_key, drop_at);
  }
  if (owns_key) {
    internal::InboxKeyOwner owner;
    owner.set_command_id(identity.command_id);
    owner.set_payload_sha256(identity.payload_sha256);
    batch.Put(store_.cf(kInboxKeysCf), owner_key,
              EncodeFramed(drop_at, 0, owner.SerializeAsString()));
    if (placed) IndexRow(&batch, entity_slot, kInboxKeysCf, owner_key, drop_at);
  }
  if (batch.Count() > 0) {
    // Not synced here: Run awaits durability once the locks are released.
    EONCE_RETURN_IF_ERROR(store_.Write(&batch, /*sync=*/false, "apply"));
    ran.wrote = true;
    if (fenced_slot) fences_.Keep(slot, fence_after);
    if (applied.on_written) applied.on_written();
  }
  (applied.effect.has_value() ? applied_ : rejected_)++;
  follow_ups_pending_ += static_cast<int64_t>(applied.follow_ups.size());
  LogSampledStep(applied.effect.has_value() ? "effect applied" : "call rejected",
                 {{"command_id", identity.command_id}, {"seq", absl::StrCat(seq)}},
                 identity.trace);
  ran.result = std::move(applied.result);
  return ran;
}

}  // namespace eonce
