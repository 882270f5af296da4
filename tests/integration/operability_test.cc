// What an operator sees: the Prometheus endpoint (checked with promtool), readiness that
// follows the store, and a sidecar that fails closed when its disk stops taking writes.
#include <chrono>
#include <thread>

#include "common/base/clock.h"
#include "common/command/command.h"
#include "common/store/crash_fs.h"
#include "common/rpc/grpc_status.h"
#include "common/base/status.h"
#include "dedupe_sidecar/doors/sidecar_service.h"
#include "eonce/v1/outcome.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "services/ledger/ledger_service.h"
#include "tests/util/health_check.h"
#include "tests/util/http_get.h"
#include "tests/util/temp_dir.h"

namespace eonce {
namespace {

using testing::HealthStatus;

class OperabilityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    LedgerServerOptions ledger_options;
    ledger_options.data_dir = testing::FreshDir("ledger");
    ledger_ = std::move(*LedgerServer::Start(ledger_options, RealClock::Get()));
  }

  // `health_probe_ms`: 0, no probe (its synced write would fail a store whose fsyncs
  // fail, whatever the calls do).
  void StartSidecar(rocksdb::Env* env = nullptr, bool warm_cache = true,
                    int64_t health_probe_ms = 50) {
    SidecarServerOptions options;
    options.data_dir = sidecar_dir_;
    options.upstream_address = "127.0.0.1:" + std::to_string(ledger_->port());
    options.metrics_address = "127.0.0.1:0";
    options.health_probe_ms = health_probe_ms;
    options.deduper.lease_ms = 2'500;
    options.deduper.forward_timeout_ms = 1'000;
    options.deduper.outcome_query_timeout_ms = 1'000;
    options.store_env = env;
    options.warm_cache = warm_cache;
    auto sidecar = SidecarServer::Start(options, RealClock::Get());
    ASSERT_TRUE(sidecar.ok()) << sidecar.status();
    sidecar_ = std::move(*sidecar);
    channel_ = grpc::CreateChannel("127.0.0.1:" + std::to_string(sidecar_->port()),
                                   grpc::InsecureChannelCredentials());
    stub_ = v1::Sidecar::NewStub(channel_);
  }

  v1::Command Open(const std::string& id, int64_t balance = 5) {
    ledger::v1::OpenAccountRequest open;
    open.set_id(id);
    open.set_initial_balance(balance);
    v1::Command c;
    c.set_command_id("open-" + id);
    c.set_target_method("/eonce.ledger.v1.Ledger/OpenAccount");
    c.set_request(open.SerializeAsString());
    c.mutable_entity()->set_type("account");
    c.mutable_entity()->set_id(id);
    c.set_idempotency_key(DeriveIdempotencyKey(c));
    FillPayloadHash(&c);
    return c;
  }

  absl::StatusOr<v1::SubmitResponse> Submit(const v1::Command& c) {
    grpc::ClientContext context;
    context.AddMetadata(kTenantHeader, "acme");
    v1::SubmitRequest request;
    *request.mutable_command() = c;
    v1::SubmitResponse response;
    grpc::Status status = stub_->Submit(&context, request, &response);
    if (!status.ok()) return FromGrpcStatus(status, &context);
    return response;
  }

  int WaitForHealth(int want) {
    int got = -1;
    for (int i = 0; i < 100; ++i) {  // at most 5 s
      got = HealthStatus(channel_);
      if (got == want) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return got;
  }

  int64_t Effects() {
    auto effects = v1::Effects::NewStub(grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(ledger_->port()), grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    context.AddMetadata(kComponentHeader, "checker");
    v1::ListEffectsRequest request;
    v1::ListEffectsResponse response;
    effects->ListEffects(&context, request, &response);
    return response.effects_size();
  }

  std::string sidecar_dir_ = testing::FreshDir("sidecar");
  std::unique_ptr<LedgerServer> ledger_;
  std::unique_ptr<SidecarServer> sidecar_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Sidecar::Stub> stub_;
};

TEST_F(OperabilityTest, MetricsEndpointPassesPromtoolAndCounts) {
  StartSidecar();
  ASSERT_TRUE(Submit(Open("a")).ok());
  ASSERT_TRUE(Submit(Open("a")).ok());  // a duplicate
  v1::Command reused = Open("a", 99);    // same key, other payload
  EXPECT_EQ(ReasonOf(Submit(reused).status()), "IDEMPOTENCY_CONFLICT");

  std::string text = testing::HttpGet(sidecar_->metrics_port(), "/metrics");
  ASSERT_FALSE(text.empty());
  EXPECT_NE(text.find("eonce_sidecar_submits_total{outcome=\"applied\"} 1"), std::string::npos) << text;
  EXPECT_NE(text.find("eonce_sidecar_dedupe_hits_total 1"), std::string::npos);
  EXPECT_NE(text.find("eonce_sidecar_conflicts_total 1"), std::string::npos);
  // The duplicate and the reused key were both answered from the finished answer in memory.
  EXPECT_NE(text.find("eonce_sidecar_finished_answer_lookups_total{result=\"hit\"} 2"),
            std::string::npos);
  EXPECT_NE(text.find("eonce_sidecar_forward_duration_seconds_count 1"), std::string::npos);
  EXPECT_NE(text.find("eonce_sidecar_parked_records 0"), std::string::npos);
  EXPECT_NE(text.find("eonce_sidecar_ready 1"), std::string::npos);
  std::string output;
  int promtool = testing::PromtoolCheck(text, &output);
  if (promtool == -1) GTEST_SKIP() << "promtool is not installed (tools/setup.sh installs it)";
  EXPECT_EQ(promtool, 0) << output;
}

// A restarted sidecar reads its records into the block cache in the background
// (--warm_cache), so the retries that follow a restart are answered from memory; without
// it the cache starts cold. The gauge shows which.
TEST_F(OperabilityTest, ARestartedSidecarWarmsItsBlockCache) {
  auto cached = [&] {
    std::string text = testing::HttpGet(sidecar_->metrics_port(), "/metrics");
    const std::string name = "\neonce_sidecar_block_cache_bytes ";
    size_t at = text.find(name);
    return at == std::string::npos ? -1.0 : std::stod(text.substr(at + name.size()));
  };
  StartSidecar();
  constexpr int kRecords = 300;
  for (int i = 0; i < kRecords; ++i) {
    ASSERT_TRUE(Submit(Open("warm-" + std::to_string(i))).ok());
  }
  ASSERT_TRUE(sidecar_->Shutdown(0).ok());  // flushes the records to table files

  StartSidecar(nullptr, /*warm_cache=*/false);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const double cold = cached();
  ASSERT_TRUE(sidecar_->Shutdown(0).ok());

  StartSidecar(nullptr, /*warm_cache=*/true);
  double warm = -1;
  for (int i = 0; i < 100 && warm < cold + kRecords * 100.0; ++i) {  // at most 5 s
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    warm = cached();
  }
  EXPECT_GE(cold, 0) << "the gauge is exported";
  // Each record is a few hundred bytes: warming reads at least 100 bytes of blocks each.
  EXPECT_GE(warm, cold + kRecords * 100.0) << "cold " << cold << ", warm " << warm;
}

TEST_F(OperabilityTest, AFullDiskTurnsReadinessOffAndARestartRecovers) {
  auto fs = NewCrashFileSystem(/*real_sync=*/false);
  StartSidecar(fs->env());
  EXPECT_EQ(WaitForHealth(1), 1);

  fs->set_no_space(true);
  EXPECT_EQ(WaitForHealth(2), 2);
  auto refused = Submit(Open("b"));
  EXPECT_FALSE(refused.ok());
  EXPECT_TRUE(refused.status().code() == absl::StatusCode::kUnavailable ||
              refused.status().code() == absl::StatusCode::kResourceExhausted)
      << refused.status();
  EXPECT_EQ(Effects(), 0) << "a command was forwarded although nothing was recorded";

  // Space returns; the orchestrator restarts the unready sidecar (its liveness probe).
  fs->set_no_space(false);
  // A store that failed cannot flush on the way down; its WAL holds what was acked.
  sidecar_->Shutdown(1000).IgnoreError();
  sidecar_.reset();
  StartSidecar(fs->env());
  EXPECT_EQ(WaitForHealth(1), 1);
  auto accepted = Submit(Open("b"));
  ASSERT_TRUE(accepted.ok()) << accepted.status();
  EXPECT_EQ(Effects(), 1);
}

// Before the business has said that its inbox keeps the outcome (docs/design.md), the
// sidecar's started record must be durable before the forward: a failing fsync refuses
// the command with nothing forwarded. Once it has, the business's write is the commit
// point and the command is applied once whatever the sidecar's disk does; readiness goes
// off either way, and a restart recovers with nothing lost or applied twice.
TEST_F(OperabilityTest, AnFsyncErrorFailsClosedAndARestartRecovers) {
  auto fs = NewCrashFileSystem(/*real_sync=*/false);
  StartSidecar(fs->env());
  fs->set_fail_syncs(true);
  auto refused = Submit(Open("a"));
  EXPECT_FALSE(refused.ok());
  EXPECT_EQ(WaitForHealth(2), 2);
  EXPECT_EQ(Effects(), 0) << "a command was forwarded although nothing was recorded";
  fs->set_fail_syncs(false);

  // A restart recovers with nothing lost.
  sidecar_->Shutdown(1000).IgnoreError();
  sidecar_.reset();
  StartSidecar(fs->env());
  ASSERT_TRUE(Submit(Open("b")).ok());
  // The refused command's started record may have reached the disk although its fsync
  // failed. Nothing was forwarded, so once its lease runs out the sidecar asks the ledger,
  // learns that it was not applied, and forwards it now.
  absl::StatusOr<v1::SubmitResponse> fresh = Submit(Open("a"));
  for (int i = 0; i < 50 && !fresh.ok() && ReasonOf(fresh.status()) == "IN_PROGRESS"; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    fresh = Submit(Open("a"));
  }
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_EQ(fresh->disposition(), v1::APPLIED);
  EXPECT_EQ(Effects(), 2);

  // The ledger's inbox keeps OpenAccount's outcomes: with the sidecar's fsyncs failing,
  // a command is applied once all the same, and its duplicate is answered from the
  // sidecar's record or, after a restart that lost it, from the inbox. Without the
  // health probe, whose synced write would fail the store (above) whenever it fell inside
  // this window: only the command's own path runs.
  sidecar_->Shutdown(1000).IgnoreError();
  sidecar_.reset();
  StartSidecar(fs->env(), /*warm_cache=*/true, /*health_probe_ms=*/0);
  ASSERT_TRUE(Submit(Open("d")).ok());  // the method is known to be kept
  fs->set_fail_syncs(true);
  auto kept = Submit(Open("c"));
  ASSERT_TRUE(kept.ok()) << kept.status();
  fs->set_fail_syncs(false);
  sidecar_->Shutdown(1000).IgnoreError();
  sidecar_.reset();
  StartSidecar(fs->env());
  auto again = Submit(Open("c"));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->result().response(), kept->result().response());
  EXPECT_EQ(Effects(), 4);
}

}  // namespace
}  // namespace eonce
