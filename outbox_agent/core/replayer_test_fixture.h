// The Replayer's test fixture: a simulated clock, a seeded random source, a real RocksDB
// outbox on the crash file system (opening it again is a crash that loses every write
// that was not synced), a scripted sidecar and a state feed that watchers can follow.
#ifndef EONCE_OUTBOX_AGENT_CORE_REPLAYER_TEST_FIXTURE_H_
#define EONCE_OUTBOX_AGENT_CORE_REPLAYER_TEST_FIXTURE_H_

#include <memory>
#include <string>

#include "common/store/crash_fs.h"
#include "common/base/status.h"
#include "gtest/gtest.h"
#include "outbox_agent/core/fake_sidecar_client.h"
#include "outbox_agent/core/outbox.h"
#include "outbox_agent/core/replayer.h"
#include "outbox_agent/core/state_feed.h"
#include "tests/util/crash.h"
#include "tests/util/temp_dir.h"

namespace eonce {

class ReplayerTest : public ::testing::Test {
 protected:
  ReplayerTest() : dir_(testing::FreshDir("replayer")) { Open(); }

  // Opens the agent; when it is open already, first a crash that loses every write that
  // was not synced (the crash file system).
  void Open() {
    replayer_.reset();
    outbox_.reset();
    credential_.reset();
    store_.reset();
    testing::CrashStore(*fs_, rocks_);
    StoreOptions store_options;
    store_options.env = fs_->env();
    auto rocks = RocksStore::Open(dir_, OutboxStore::ColumnFamilies(filters_), store_options);
    ASSERT_TRUE(rocks.ok()) << rocks.status();
    rocks_ = std::move(*rocks);
    store_ = std::make_unique<OutboxStore>(*rocks_, clock_, OutboxStoreOptions());
    ASSERT_TRUE(store_->RecoverAfterRestart().ok());
    credential_ = std::move(*CredentialState::Load(*store_, "acme", "agent", 1));
    outbox_ = std::make_unique<Outbox>(*store_, *credential_, clock_, random_, CommandLimits());
    options_.max_in_flight = 8;
    options_.claim_ttl_ms = 30'000;
    options_.submit_timeout_ms = 10'000;
    options_.retry.max_unclassified = 3;
    options_.retry.max_attempts = 10;
    options_.retry.max_age_ms = 3'600'000;
    options_.retry.retention_margin_ms = 60'000;
    replayer_ = std::make_unique<Replayer>(*store_, sidecar_, *credential_, clock_, random_,
                                           options_, &feed_);
  }

  static v1::Command CommandOf(const std::string& id, const std::string& entity,
                               const std::string& request = "",
                               const std::string& method = "/eonce.ledger.v1.Ledger/Transfer") {
    v1::Command c;
    c.set_command_id(id);
    c.set_target_method(method);
    c.set_request(request.empty() ? "req-" + id : request);
    c.mutable_entity()->set_type("account");
    c.mutable_entity()->set_id(entity);
    return c;
  }

  std::string Enqueue(const std::string& id, const std::string& entity,
                      const std::string& request = "") {
    auto r = outbox_->Enqueue(CommandOf(id, entity, request));
    EXPECT_TRUE(r.ok()) << r.status();
    return id;
  }

  OutboxRecord Get(const std::string& id) { return **store_->Get(id); }
  OutboxState StateOf(const std::string& id) { return Get(id).state(); }

  static absl::Status Fail(absl::StatusCode code, const char* reason, int64_t retry_ms = -1) {
    absl::Status s = reason == nullptr ? absl::Status(code, "scripted") : Error(code, reason, "scripted");
    return retry_ms >= 0 ? WithRetryAfter(s, retry_ms) : s;
  }

  std::string dir_;
  std::shared_ptr<CrashFileSystem> fs_ = NewCrashFileSystem();
  ManualClock clock_;
  SeededRandom random_{1234};
  FakeSidecarClient sidecar_;
  StateFeed feed_;
  OutboxStore::Filters filters_{clock_};
  ReplayerOptions options_;
  std::unique_ptr<RocksStore> rocks_;
  std::unique_ptr<OutboxStore> store_;
  std::unique_ptr<CredentialState> credential_;
  std::unique_ptr<Outbox> outbox_;
  std::unique_ptr<Replayer> replayer_;
};

}  // namespace eonce

#endif  // EONCE_OUTBOX_AGENT_CORE_REPLAYER_TEST_FIXTURE_H_
