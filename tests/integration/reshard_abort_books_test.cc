// A move aborted after its copy, with a ledger per shard (cross_slot_credits) behind
// sharded sidecars that move the business's data (move_business_data), over loopback with
// real stores and the real mover. The copy handed the run off in the exporter's ledger;
// the abort gives the run back: once the exporter's sidecar holds the abort's map, its
// ledger counts the run and relays the run's pending credit again. The target was down at
// the abort, so its partial copy stays: it is neither counted nor relayed, and the books
// summed over the shards are the truth.
#include <fstream>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/base/clock.h"
#include "common/command/command.h"
#include "common/coord/memory_map_store.h"
#include "common/coord/slots.h"
#include "dedupe_sidecar/doors/sidecar_service.h"
#include "eonce/v1/outcome.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "services/ledger/ledger_service.h"
#include "tests/integration/ledger_calls.h"
#include "tests/integration/sharded_sidecars.h"
#include "tests/util/temp_dir.h"
#include "tools/reshard/grpc_shard_admin.h"
#include "tools/reshard/mover.h"

namespace eonce {
namespace {

constexpr char kTenant[] = "acme";

class ReshardAbortBooksTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string dir = testing::FreshDir("reshard-abort");
    std::ofstream(dir + "/policy") << "act acme * *\nallow acme * *\nplatform acme root\n";
    for (int i = 0; i < 2; ++i) {
      LedgerServerOptions ledger_options;
      ledger_options.data_dir = testing::FreshDir(absl::StrCat("abort-ledger", i));
      ledger_options.ledger.cross_slot_credits = true;
      auto ledger = LedgerServer::Start(ledger_options, RealClock::Get());
      ASSERT_TRUE(ledger.ok()) << ledger.status();
      ledgers_[i] = std::move(*ledger);
    }
    absl::Status started = testing::StartShardedSidecars(
        store_, 2,
        [&](int i) {
          SidecarServerOptions options = testing::SidecarOptionsFor(
              ledgers_[i]->port(), testing::FreshDir(absl::StrCat("abort-s", i)));
          options.policy_file = dir + "/policy";
          options.move_business_data = true;
          return options;
        },
        leases_, sidecars_, stubs_);
    ASSERT_TRUE(started.ok()) << started;
    identity_.tenant = kTenant;
    identity_.operator_name = "root";
    x_ = AccountOn("s0");
    z_ = AccountOn("s1");
    slot_ = SlotOf(kTenant, "account", x_);
    ASSERT_TRUE(testing::SubmitTo(*stubs_[0], testing::OpenAccountCommand(x_, 100), kTenant).ok());
    ASSERT_TRUE(testing::SubmitTo(*stubs_[1], testing::OpenAccountCommand(z_, 100), kTenant).ok());
    // x pays z 7: a debit on s0's ledger and a credit waiting in its outbox (no relay runs).
    ledger::v1::TransferRequest t;
    t.set_from(x_);
    t.set_to(z_);
    t.set_amount(7);
    auto paid = testing::SubmitTo(
        *stubs_[0],
        testing::LedgerCommand("pay-x", testing::kTransferMethod, t.SerializeAsString(), "", x_),
        kTenant);
    ASSERT_TRUE(paid.ok()) << paid.status();
    ASSERT_EQ(PendingFollowUps(0), 1);
  }

  void TearDown() override {
    for (auto& sidecar : sidecars_) {
      if (sidecar != nullptr) {
        EXPECT_TRUE(sidecar->Shutdown(1000).ok());
      }
    }
    for (auto& ledger : ledgers_) {
      if (ledger != nullptr) {
        EXPECT_TRUE(ledger->Shutdown(1000).ok());
      }
    }
  }

  std::string AccountOn(const std::string& shard) {
    SlotMap map = *store_.Read();
    for (int n = 0;; ++n) {
      std::string id = absl::StrCat("acct-", n);
      if (map.OwnerOf(SlotOf(kTenant, "account", id)) == shard) return id;
    }
  }

  // The credits shard `i`'s ledger would relay now.
  int PendingFollowUps(int i) {
    auto stub = v1::FollowUps::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", ledgers_[i]->port()), grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    context.AddMetadata(kComponentHeader, "checker");
    context.AddMetadata(kTenantHeader, kTenant);
    v1::PullFollowUpsRequest request;
    request.set_limit(100);
    v1::PullFollowUpsResponse response;
    grpc::Status status = stub->PullFollowUps(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response.follow_ups_size();
  }

  MoveOptions Options(bool abort) {
    MoveOptions options;
    options.first = slot_;
    options.last = slot_;
    options.to = abort ? "" : "s1";
    options.abort = abort;
    options.drain_timeout_ms = 2'000;
    return options;
  }

  absl::StatusOr<MoveReport> Move(const MoveOptions& options) {
    return MoveSlots(options, store_, GrpcShardAdmins(identity_), RealClock::Get());
  }

  MemoryMapStore store_{RealClock::Get()};
  std::unique_ptr<ShardLease> leases_[2];  // outlive the sidecars
  OperatorIdentity identity_;
  std::unique_ptr<LedgerServer> ledgers_[2];
  std::unique_ptr<SidecarServer> sidecars_[2];
  std::unique_ptr<v1::Sidecar::Stub> stubs_[2];
  std::string x_, z_;
  uint32_t slot_ = 0;
};

TEST_F(ReshardAbortBooksTest, AnAbortAfterTheCopyWithTheTargetDownGivesTheBooksBackToTheOwner) {
  MoveOptions copy = Options(/*abort=*/false);
  copy.stop_after = "copy";
  ASSERT_TRUE(Move(copy).ok());
  // The copy handed the run off at s0: not counted, its credit not relayed.
  EXPECT_EQ(PendingFollowUps(0), 0);
  // s1's sidecar is down for the abort: its partial copy is not dropped.
  ASSERT_TRUE(sidecars_[1]->Shutdown(1000).ok());
  sidecars_[1].reset();
  absl::StatusOr<MoveReport> rolled = Move(Options(/*abort=*/true));
  ASSERT_TRUE(rolled.ok()) << rolled.status();
  EXPECT_EQ(rolled->outcome, "rolled back");
  const uint64_t aborted = store_.Read()->epoch();
  ASSERT_TRUE(sidecars_[0]->AwaitShardServing(aborted, absl::Seconds(30)));

  // s0 holds the run again, before any write to it: its credit is relayed, x is counted.
  EXPECT_EQ(PendingFollowUps(0), 1);
  // s1's copy of x and of the credit: not counted, not relayed.
  EXPECT_EQ(PendingFollowUps(1), 0);
  int64_t balances = 0, minted = 0, in_flight = 0;
  for (auto& ledger : ledgers_) {
    auto total = ledger->core().GetTotal();
    ASSERT_TRUE(total.ok()) << total.status();
    balances += total->total_balance();
    minted += total->total_minted();
    in_flight += total->credits_sent() - total->credits_received();
  }
  EXPECT_EQ(ledgers_[0]->core().GetTotal()->total_balance(), 93);
  EXPECT_EQ(ledgers_[1]->core().GetTotal()->total_balance(), 100);
  // The truth: 200 minted, 93 on x, 100 on z, 7 in flight.
  EXPECT_EQ(minted, 200);
  EXPECT_EQ(balances, 193);
  EXPECT_EQ(in_flight, 7);
}

}  // namespace
}  // namespace eonce
