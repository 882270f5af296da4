// The real sidecar in front of the real ledger, over loopback gRPC with real RocksDB:
// the business's inbox is the commit point (docs/design.md, "Where the truth is"). The
// ledger says so in its `eonce-inbox` trailer; the sidecar then forwards and answers
// without syncing its own records; and a sidecar that lost them (its data directory
// replaced, as a power cut takes back unsynced writes) still applies nothing twice and
// lets no key be reused: the inbox answers and refuses in its place.
#include <filesystem>
#include <memory>

#include "common/base/clock.h"
#include "common/command/command.h"
#include "common/rpc/grpc_status.h"
#include "common/base/status.h"
#include "dedupe_sidecar/doors/sidecar_service.h"
#include "eonce/ledger/v1/ledger.grpc.pb.h"
#include "eonce/v1/outcome.grpc.pb.h"
#include "eonce/v1/sidecar.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "services/ledger/ledger_service.h"
#include "tests/integration/ledger_calls.h"
#include "tests/util/temp_dir.h"

namespace eonce {
namespace {

class CommitPointTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    LedgerServerOptions ledger_options;
    ledger_options.data_dir = testing::FreshDir("ledger");
    ledger_options.legacy_mode = GetParam();
    auto ledger = LedgerServer::Start(ledger_options, RealClock::Get());
    ASSERT_TRUE(ledger.ok()) << ledger.status();
    ledger_ = std::move(*ledger);
    auto to_ledger = grpc::CreateChannel("127.0.0.1:" + std::to_string(ledger_->port()),
                                         grpc::InsecureChannelCredentials());
    direct_ = ledger::v1::Ledger::NewStub(to_ledger);
    effects_ = v1::Effects::NewStub(to_ledger);
    sidecar_dir_ = testing::FreshDir("sidecar");
    StartSidecar();
    for (const char* id : {"a", "b"}) {
      ledger::v1::OpenAccountRequest open;
      open.set_id(id);
      open.set_initial_balance(1000);
      auto r = Submit(testing::LedgerCommand(std::string("open-") + id,
                                             testing::kOpenAccountMethod,
                                             open.SerializeAsString()));
      ASSERT_TRUE(r.ok()) << r.status();
    }
  }

  void TearDown() override {
    if (sidecar_ != nullptr) {
      EXPECT_TRUE(sidecar_->Shutdown(1000).ok());
    }
    if (ledger_ != nullptr) {
      EXPECT_TRUE(ledger_->Shutdown(1000).ok());
    }
  }

  void StartSidecar() {
    auto sidecar = SidecarServer::Start(testing::SidecarOptionsFor(ledger_->port(), sidecar_dir_),
                                        RealClock::Get());
    ASSERT_TRUE(sidecar.ok()) << sidecar.status();
    sidecar_ = std::move(*sidecar);
    sidecar_stub_ = v1::Sidecar::NewStub(grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(sidecar_->port()), grpc::InsecureChannelCredentials()));
  }

  // The sidecar restarts with none of its records, as if every write since its last sync
  // had been lost.
  void ForgetTheSidecar() {
    ASSERT_TRUE(sidecar_->Shutdown(1000).ok());
    sidecar_.reset();
    std::filesystem::remove_all(sidecar_dir_);
    sidecar_dir_ = testing::FreshDir("sidecar");
    StartSidecar();
  }

  absl::StatusOr<v1::SubmitResponse> Submit(const v1::Command& c) {
    return testing::SubmitTo(*sidecar_stub_, c);
  }
  int EffectsOf(const std::string& command_id) {
    return testing::EffectsOf(*effects_, command_id);
  }
  int64_t Balance(const std::string& id) { return testing::BalanceOf(*direct_, id); }

  std::string sidecar_dir_;
  std::unique_ptr<LedgerServer> ledger_;
  std::unique_ptr<SidecarServer> sidecar_;
  std::unique_ptr<v1::Sidecar::Stub> sidecar_stub_;
  std::unique_ptr<ledger::v1::Ledger::Stub> direct_;
  std::unique_ptr<v1::Effects::Stub> effects_;
};

TEST_P(CommitPointTest, TheLedgerSaysWhetherItsInboxKeepsTheOutcome) {
  const bool legacy = GetParam();
  grpc::ClientContext context;
  context.AddMetadata(kComponentHeader, kSidecarComponent);  // what a sidecar sends
  context.AddMetadata(kCommandIdHeader, "direct-1");
  context.AddMetadata(kIdempotencyKeyHeader, "direct-key-1");
  context.AddMetadata(kTenantHeader, "acme");
  ledger::v1::TransferResponse response;
  ASSERT_TRUE(direct_->Transfer(&context, testing::AToB(1), &response).ok());
  const auto& trailers = context.GetServerTrailingMetadata();
  auto it = trailers.find(kInboxTrailer);
  if (legacy) {
    EXPECT_EQ(it, trailers.end());
  } else {
    ASSERT_NE(it, trailers.end());
    EXPECT_EQ(std::string(it->second.data(), it->second.size()), kInboxKept);
  }
  // Through the sidecar: after the first answer of a method, forwards go out before the
  // sidecar's sync only where the inbox keeps the outcome (SetUp's second OpenAccount
  // was one already).
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(Submit(testing::TransferCommand("t" + std::to_string(i), 1, "")).ok());
  }
  EXPECT_EQ(sidecar_->deduper().stats().forwards_before_sync.load(), legacy ? 0 : 1 + 2);
}

TEST_P(CommitPointTest, ASidecarThatForgotItsRecordsAppliesNothingTwiceAndReusesNoKey) {
  if (GetParam()) GTEST_SKIP() << "a legacy business keeps no inbox to answer in its place";
  v1::Command t1 = testing::TransferCommand("t1", 100, "key-1");
  auto first = Submit(t1);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(Balance("a"), 900);

  // Another command under t1's key, and t1's key with another payload: the sidecar has no
  // record of the key any more, and the inbox refuses both.
  ForgetTheSidecar();
  // The same payload under another command id.
  auto reused = Submit(testing::TransferCommand("t2", 100, "key-1"));
  EXPECT_EQ(reused.status().code(), absl::StatusCode::kAlreadyExists) << reused.status();
  EXPECT_EQ(ReasonOf(reused.status()), "KEY_REUSED");
  ForgetTheSidecar();
  auto other_payload = Submit(testing::TransferCommand("t1", 7, "key-1"));
  EXPECT_EQ(ReasonOf(other_payload.status()), "IDEMPOTENCY_CONFLICT") << other_payload.status();

  // t1 itself, retried: the inbox answers with the stored result, byte for byte.
  ForgetTheSidecar();
  auto again = Submit(t1);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->result().response(), first->result().response());
  auto duplicate = Submit(t1);
  ASSERT_TRUE(duplicate.ok());
  EXPECT_EQ(duplicate->disposition(), v1::REPLAYED);

  EXPECT_EQ(EffectsOf("t1"), 1);
  EXPECT_EQ(EffectsOf("t2"), 0);
  EXPECT_EQ(Balance("a"), 900);
  EXPECT_EQ(Balance("b"), 1100);
}

INSTANTIATE_TEST_SUITE_P(Modes, CommitPointTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Legacy" : "Inbox";
                         });

}  // namespace
}  // namespace eonce
