// The sidecar's Prometheus metrics, read from the Deduper's counters, the admission
// control, the store and the audit log at each scrape.
#include "absl/strings/str_cat.h"
#include "common/rpc/server_security.h"
#include "dedupe_sidecar/doors/sidecar_service.h"

namespace eonce {

std::vector<prometheus::MetricFamily> SidecarServer::Collect() const {
  const DeduperStats& st = deduper_->stats();
  auto n = [](const std::atomic<int64_t>& v) { return static_cast<double>(v.load()); };
  std::vector<prometheus::MetricFamily> out;
  out.push_back(InsecureGauge(insecure_));
  out.push_back(CounterFamily(
      "eonce_sidecar_submits_total", "Submits by outcome.",
      {{{{"outcome", "applied"}}, n(st.applied)},
       {{{"outcome", "rejected"}}, n(st.rejected)},
       {{{"outcome", "replayed"}}, n(st.replayed)},
       {{{"outcome", "conflict"}}, n(st.conflicts)},
       {{{"outcome", "in_progress"}}, n(st.in_progress)},
       {{{"outcome", "expired"}}, n(st.expired)},
       {{{"outcome", "denied"}}, n(st.denied)},
       {{{"outcome", "invalid"}}, n(st.invalid)},
       {{{"outcome", "parked"}}, n(st.parked)},
       {{{"outcome", "outcome_pending"}}, n(st.pending)},
       {{{"outcome", "upstream_unavailable"}}, n(st.upstream_unavailable)},
       {{{"outcome", "upstream_refused"}}, n(st.refused)},
       {{{"outcome", "store_error"}}, n(st.store_errors)},
       {{{"outcome", "audit_backlog"}}, n(st.audit_backlog)}}));
  out.push_back(CounterFamily(
      "eonce_sidecar_trace_context_dropped_total",
      "Malformed W3C trace context dropped from calls and commands (never refused), by header.",
      {{{{"header", "traceparent"}}, n(st.traceparents_dropped)},
       {{{"header", "tracestate"}}, n(st.tracestates_dropped)}}));
  out.push_back(CounterFamily("eonce_sidecar_dedupe_hits_total",
                              "Duplicates answered from a stored record.", {{{}, n(st.replayed)}}));
  out.push_back(CounterFamily("eonce_sidecar_conflicts_total",
                              "Keys reused with another payload or command id.",
                              {{{}, n(st.conflicts)}}));
  out.push_back(CounterFamily("eonce_sidecar_in_progress_total",
                              "Duplicates answered IN_PROGRESS.", {{{}, n(st.in_progress)}}));
  out.push_back(CounterFamily("eonce_sidecar_authorization_denials_total",
                              "Submits refused by the policy or the caller's identity.",
                              {{{}, n(st.denied)}}));
  out.push_back(CounterFamily("eonce_sidecar_admission_refused_total",
                              "Calls refused because too many were in flight (in all or for "
                              "their tenant); nothing was recorded.",
                              {{{}, static_cast<double>(admission_->refused())}}));
  out.push_back(GaugeFamily("eonce_sidecar_calls_in_flight", "Calls admitted and not yet answered.",
                            {{{}, static_cast<double>(admission_->in_flight())}}));
  out.push_back(CounterFamily("eonce_sidecar_forwards_total", "Calls forwarded to the business.",
                              {{{}, n(st.forwards)}}));
  out.push_back(CounterFamily(
      "eonce_sidecar_forwards_batched_total",
      "Calls forwarded inside ForwardBatch calls, many in one (a business that serves "
      "eonce.v1.Forwards).",
      {{{}, static_cast<double>(owned_upstream_ != nullptr ? owned_upstream_->forwards_batched()
                                                           : 0)}}));
  out.push_back(CounterFamily(
      "eonce_sidecar_forwards_split_total",
      "Batched forwards sent again one call each because their batch, or its answer, was "
      "past a message limit.",
      {{{}, static_cast<double>(owned_upstream_ != nullptr ? owned_upstream_->forwards_split()
                                                           : 0)}}));
  out.push_back(CounterFamily(
      "eonce_sidecar_forwards_before_sync_total",
      "Calls forwarded before their started record was synced: the business keeps an inbox "
      "and its write is the commit point.",
      {{{}, n(st.forwards_before_sync)}}));
  out.push_back(CounterFamily(
      "eonce_sidecar_forwards_claimed_in_memory_total",
      "Calls forwarded to a business that keeps an inbox whose started record was only "
      "claimed in memory, never written.",
      {{{}, n(st.claimed_in_memory)}}));
  out.push_back(GaugeFamily("eonce_sidecar_claims_in_flight",
                            "Commands in flight whose started record is claimed in memory.",
                            {{{}, static_cast<double>(deduper_->claims())}}));
  out.push_back(CounterFamily("eonce_sidecar_recovered_total",
                              "Unknown outcomes resolved through QueryOutcome.",
                              {{{}, n(st.recovered)}}));
  out.push_back(CounterFamily("eonce_sidecar_fenced_answers_total",
                              "Late answers refused by their fencing token.",
                              {{{}, n(st.fenced)}}));
  out.push_back(st.forward_latency.Family("eonce_sidecar_forward_duration_seconds",
                                          "Time from forwarding a call to its answer."));
  out.push_back(GaugeFamily("eonce_sidecar_parked_records",
                            "Records whose outcome is unknown, waiting for an operator.",
                            {{{}, static_cast<double>(records_->parked_count())}}));
  out.push_back(CounterFamily("eonce_sidecar_compaction_expired_total",
                              "Records whose response body compaction dropped (tombstoned).",
                              {{{}, static_cast<double>(filters_->stats.trimmed.load())}}));
  out.push_back(CounterFamily("eonce_sidecar_compaction_dropped_total",
                              "Entries compaction dropped at the end of their retention.",
                              {{{}, static_cast<double>(filters_->stats.dropped.load())}}));
  out.push_back(GaugeFamily("eonce_sidecar_store_size_bytes",
                            "RocksDB live SST and memtable bytes.",
                            {{{}, static_cast<double>(rocks_->ApproximateBytes())}}));
  const FinishedAnswers& answers = records_->finished_answers();
  out.push_back(CounterFamily(
      "eonce_sidecar_finished_answer_lookups_total",
      "Record lookups by whether the memory of recently finished answers held the record.",
      {{{{"result", "hit"}}, static_cast<double>(answers.hits())},
       {{{"result", "miss"}}, static_cast<double>(answers.misses())}}));
  out.push_back(GaugeFamily("eonce_sidecar_finished_answer_bytes",
                            "Bytes held by the memory of recently finished answers.",
                            {{{}, static_cast<double>(answers.bytes())}}));
  out.push_back(GaugeFamily("eonce_sidecar_block_cache_bytes",
                            "Bytes of data blocks the RocksDB block cache holds.",
                            {{{}, static_cast<double>(rocks_->block_cache_usage())}}));
  out.push_back(CounterFamily("eonce_sidecar_audit_events_total", "Audit events appended.",
                              {{{}, static_cast<double>(audit_->appended())}}));
  out.push_back(CounterFamily("eonce_sidecar_audit_lost_total",
                              "Audit events that found the audit queue full and went to the "
                              "error log instead (commands are refused first: AUDIT_BACKLOG).",
                              {{{}, static_cast<double>(audit_->lost())}}));
  out.push_back(CounterFamily("eonce_sidecar_audit_writes_total",
                              "Store writes that carried audit events (several events each "
                              "under load).",
                              {{{}, static_cast<double>(audit_->writes())}}));
  out.push_back(GaugeFamily("eonce_sidecar_ready", "1 when serving, 0 when not ready.",
                            {{{}, serving_.load() ? 1.0 : 0.0}}));
  out.push_back(GaugeFamily("eonce_sidecar_audit_chain_broken",
                            "1 once a verification found the audit chain broken.",
                            {{{}, audit_->chain_broken() ? 1.0 : 0.0}}));
  out.push_back(GaugeFamily("eonce_sidecar_retention_seconds",
                            "The retention the sidecar advertises (GetInfo): duplicates are "
                            "recognised at least this long.",
                            {{{}, records_->advertised_retention_ms() / 1000.0}}));
  if (shards_ != nullptr) {
    std::shared_ptr<const SlotMap> map = shards_->map();
    out.push_back(CounterFamily(
        "eonce_sidecar_slot_refusals_total",
        "Commands refused before anything was written because another shard owns their slot "
        "(moved) or it is being moved (migrating).",
        {{{{"reason", "moved"}}, n(st.slot_moved)},
         {{{"reason", "migrating"}}, n(st.slot_migrating)}}));
    out.push_back(GaugeFamily("eonce_sidecar_slot_map_epoch", "The epoch of the slot map held.",
                              {{{}, static_cast<double>(map ? map->epoch() : 0)}}));
    out.push_back(GaugeFamily(
        "eonce_sidecar_slots_owned", "Slots this shard takes commands for (owned, not moving).",
        {{{}, static_cast<double>(map ? map->WritableSlotsOf(shards_->shard()) : 0)}}));
    out.push_back(GaugeFamily(
        "eonce_sidecar_shard_leased",
        "1 while this sidecar holds its shard's lease (and so may take commands).",
        {{{}, shards_->serve_until_ms() > clock_->NowMs() ? 1.0 : 0.0}}));
    out.push_back(GaugeFamily("eonce_sidecar_slot_passes_in_flight",
                              "Commands let in and still running, over all slots.",
                              {{{}, static_cast<double>(shards_->in_flight())}}));
  }
  return out;
}

}  // namespace eonce
