// The Deduper's test fixture: a real RocksDB on the crash file system (a restart is a
// crash that loses what was not synced), a scripted upstream, a manual clock, and the
// negative-control record stores switched on per test.
#ifndef EONCE_DEDUPE_SIDECAR_CORE_DEDUPER_TEST_FIXTURE_H_
#define EONCE_DEDUPE_SIDECAR_CORE_DEDUPER_TEST_FIXTURE_H_

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/store/crash_fs.h"
#include "common/base/status.h"
#include "dedupe_sidecar/core/deduper.h"
#include "dedupe_sidecar/upstream/fake_upstream.h"
#include "dedupe_sidecar/core/negative_controls.h"
#include "gtest/gtest.h"
#include "tests/util/crash.h"
#include "tests/util/temp_dir.h"

namespace eonce {

constexpr int64_t kLeaseMs = 10'000;
constexpr int64_t kRetentionMs = 60'000;
constexpr int64_t kForensicMs = 600'000;

class DeduperTest : public ::testing::Test {
 protected:
  DeduperTest() : dir_(testing::FreshDir("deduper")) { Open(); }
  ~DeduperTest() override { Close(); }

  void Open(DeduperOptions options = {}) {
    filters_ = std::make_unique<RecordStoreFilters>(clock_);
    auto families = RecordStore::ColumnFamilies(*filters_);
    for (auto& f : AuditLog::ColumnFamilies(*filters_)) families.push_back(f);
    StoreOptions store_options;
    store_options.env = fs_->env();
    store_options.inline_durability = true;  // the Deduper answers before Submit returns
    auto rocks = RocksStore::Open(dir_, families, store_options);
    ASSERT_TRUE(rocks.ok()) << rocks.status();
    rocks_ = std::move(*rocks);
    if (unfenced_) {
      store_ = std::make_unique<UnfencedRecordStore>(*rocks_, clock_, retention_);
    } else if (!unsynced_states_.empty()) {
      store_ = std::make_unique<UnsyncedRecordStore>(*rocks_, clock_, retention_,
                                                     unsynced_states_);
    } else {
      store_ = std::make_unique<RecordStore>(*rocks_, clock_, retention_);
    }
    ASSERT_TRUE(store_->SettleRetention().ok());
    audit_ = std::make_unique<AuditLog>(*rocks_, clock_, 10 * kForensicMs);
    if (policy_ == nullptr) policy_ = std::move(*PolicyStore::Open(""));
    options.lease_ms = kLeaseMs;
    options_ = options;
    deduper_ = std::make_unique<Deduper>(*store_, *audit_, upstream_, *policy_, clock_, options);
  }

  void Close() {
    deduper_.reset();
    audit_.reset();
    store_.reset();
    if (rocks_ != nullptr) rocks_->CloseWithoutFlush();
    rocks_.reset();
  }

  // A crash and a restart: everything in memory goes, and so does every write that was
  // not synced (the crash file system), so a synced write made unsynced fails a test.
  void Restart(DeduperOptions options = {}) {
    deduper_.reset();
    audit_.reset();
    store_.reset();
    testing::CrashStore(*fs_, rocks_);
    Open(options);
  }

  v1::Command Cmd(const std::string& id, const std::string& request = "transfer 10") {
    v1::Command c;
    c.set_command_id(id);
    c.set_actor("alice");
    c.set_target_method("/eonce.ledger.v1.Ledger/Transfer");
    c.set_request(request);
    c.mutable_entity()->set_type("account");
    c.mutable_entity()->set_id("a");
    c.set_idempotency_key(DeriveIdempotencyKey(c));
    FillPayloadHash(&c);
    return c;
  }

  // Submits as workload "agent" of `tenant`.
  absl::StatusOr<v1::SubmitResponse> Submit(const v1::Command& command,
                                            const std::string& tenant = "acme") {
    Caller caller;
    caller.tenant = tenant;
    caller.workload = "agent";
    caller.credential_epoch = 3;
    return SubmitAs(caller, command);
  }

  absl::StatusOr<v1::SubmitResponse> SubmitAs(const Caller& caller, const v1::Command& command) {
    absl::StatusOr<v1::SubmitResponse> out = absl::InternalError("callback not run");
    deduper_->Submit(caller, command, [&](absl::StatusOr<v1::SubmitResponse> r) { out = r; });
    return out;
  }

  v1::RecordState StateOf(const std::string& key, const std::string& tenant = "acme") {
    Caller caller;
    caller.tenant = tenant;
    v1::ReconcileRequest request;
    request.set_idempotency_key(key);
    auto response = deduper_->Reconcile(caller, request);
    EXPECT_TRUE(response.ok()) << response.status();
    return response.ok() ? response->state() : v1::RECORD_STATE_UNSPECIFIED;
  }

  // The decisions audited for `command_id`, less the lookups a test makes to see a
  // record's state (StateOf: "reconciled").
  std::vector<std::string> AuditDecisions(const std::string& command_id) {
    v1::QueryAuditRequest request;
    request.set_command_id(command_id);
    auto events = audit_->Query("acme", request);
    EXPECT_TRUE(events.ok());
    std::vector<std::string> out;
    for (const auto& e : *events) {
      if (e.decision() != "reconciled") out.push_back(e.decision());
    }
    return out;
  }

  std::string dir_;
  std::shared_ptr<CrashFileSystem> fs_ = NewCrashFileSystem();
  ManualClock clock_;
  FakeUpstream upstream_;
  std::unique_ptr<RecordStoreFilters> filters_;
  std::unique_ptr<RocksStore> rocks_;
  std::unique_ptr<RecordStore> store_;
  std::unique_ptr<AuditLog> audit_;
  std::unique_ptr<PolicyStore> policy_;
  DeduperOptions options_;
  RetentionOptions retention_{kRetentionMs, kForensicMs};
  // Negative controls: records in these states are written without a sync.
  std::set<Record::State> unsynced_states_;
  bool unfenced_ = false;
  std::unique_ptr<Deduper> deduper_;
};


}  // namespace eonce

#endif  // EONCE_DEDUPE_SIDECAR_CORE_DEDUPER_TEST_FIXTURE_H_
