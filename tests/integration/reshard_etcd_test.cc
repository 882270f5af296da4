// Slot moves on a real etcd member (tests/util/etcd_cluster.h) with real sidecars over
// loopback and real RocksDB: each sidecar holds its shard's lease in etcd and reads the map
// there, and `eonce reshard`'s mover changes it by compare-and-swap. Two shards stand in
// front of one ledger in legacy mode (no inbox), so only the sidecars' records stand
// between a duplicate and a second effect: a map that forks, or two owners of a slot, is
// seen as a second effect.
//
// Finding 1: an abort decided before the flip and landing after it, while the new owner
// is down, is refused (ALREADY_FLIPPED); without the predecessor compare it lands and the
// old owner applies a command the new owner already applied.
// Finding 2: two movers racing from one epoch: one wins each step and the other finds the
// move done; without the compare, the late freeze clears the new owner's records and the
// duplicate is applied again. An import after the new owner took the run is refused.
#include <chrono>
#include <fstream>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/base/clock.h"
#include "common/coord/blind_map_store.h"
#include "common/coord/etcd_map_store.h"
#include "common/rpc/grpc_status.h"
#include "common/coord/slots.h"
#include "common/base/status.h"
#include "dedupe_sidecar/doors/sidecar_service.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "services/ledger/ledger_service.h"
#include "tests/integration/ledger_calls.h"
#include "tests/util/etcd_cluster.h"
#include "tests/util/temp_dir.h"
#include "tools/reshard/grpc_shard_admin.h"
#include "tools/reshard/mover.h"

namespace eonce {
namespace {

constexpr char kTenant[] = "acme";
constexpr char kPrefix[] = "/eonce/reshard_etcd_test";

class ReshardEtcdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto etcd = testing::EtcdCluster::Start(1);
    ASSERT_TRUE(etcd.ok()) << etcd.status();
    etcd_ = std::move(*etcd);
    EtcdCoordOptions coordination;
    coordination.endpoints = etcd_->Endpoints();
    coordination.prefix = kPrefix;
    auto created = EtcdCoordination::Create(coordination, RealClock::Get());
    ASSERT_TRUE(created.ok()) << created.status();
    coordination_ = std::move(*created);

    dir_ = testing::FreshDir("reshard_etcd");
    std::ofstream(dir_ + "/policy") << "act acme * *\nallow acme * *\nplatform acme root\n";
    LedgerServerOptions ledger_options;
    ledger_options.data_dir = testing::FreshDir("ledger");
    ledger_options.legacy_mode = true;
    auto ledger = LedgerServer::Start(ledger_options, RealClock::Get());
    ASSERT_TRUE(ledger.ok()) << ledger.status();
    ledger_ = std::move(*ledger);
    effects_ = v1::Effects::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", ledger_->port()), grpc::InsecureChannelCredentials()));

    std::vector<v1::ShardInfo> shards(2);
    for (int i = 0; i < 2; ++i) {
      shards[i].set_id(absl::StrCat("s", i));
      shards[i].set_address("pending:1");
    }
    absl::StatusOr<SlotMap> first = store().CompareAndSwap(0, *SlotMap::Even(shards));
    ASSERT_TRUE(first.ok()) << first.status();
    for (int i = 0; i < 2; ++i) {
      ASSERT_NO_FATAL_FAILURE(StartSidecar(i));
      shards[i].set_address(absl::StrCat("127.0.0.1:", sidecars_[i]->port()));
    }
    absl::StatusOr<SlotMap> named = store().CompareAndSwap(first->epoch(), *SlotMap::Even(shards));
    ASSERT_TRUE(named.ok()) << named.status();
    for (auto& sidecar : sidecars_) {
      ASSERT_TRUE(sidecar->AwaitShardServing(named->epoch(), absl::Seconds(30)));
    }
    identity_.tenant = kTenant;
    identity_.operator_name = "root";
    // An account in s0's slots; its opening is the command whose duplicates are watched.
    for (int n = 0;; ++n) {
      x_ = absl::StrCat("acct-", n);
      slot_ = SlotOf(kTenant, "account", x_);
      if (named->OwnerOf(slot_) == "s0") break;
    }
    absl::StatusOr<v1::SubmitResponse> opened = Submit(0, Open());
    ASSERT_TRUE(opened.ok()) << opened.status();
    // The account x pays, opened on whichever shard owns its slot; then x's first payment.
    const int y_shard = named->OwnerOf(SlotOf(kTenant, "account", y_)) == "s0" ? 0 : 1;
    absl::StatusOr<v1::SubmitResponse> y = Submit(y_shard, testing::OpenAccountCommand(y_, 0));
    ASSERT_TRUE(y.ok()) << y.status();
    absl::StatusOr<v1::SubmitResponse> paid = Submit(0, PayY("pay-x"));
    ASSERT_TRUE(paid.ok()) << paid.status();
  }

  // A command on x's entity (its slot): a transfer of 5 from x to y.
  v1::Command PayY(const std::string& id) const {
    ledger::v1::TransferRequest t;
    t.set_from(x_);
    t.set_to(y_);
    t.set_amount(5);
    return testing::LedgerCommand(id, testing::kTransferMethod, t.SerializeAsString(), "", x_);
  }

  void StartSidecar(int i) {
    SidecarServerOptions options = testing::SidecarOptionsFor(
        ledger_->port(), absl::StrCat(dir_, "/s", i));
    options.policy_file = dir_ + "/policy";
    options.shard_id = absl::StrCat("s", i);
    options.etcd_endpoints = etcd_->Endpoints();
    options.etcd_prefix = kPrefix;
    options.lease_ttl_ms = 2'000;
    auto sidecar = SidecarServer::Start(options, RealClock::Get());
    ASSERT_TRUE(sidecar.ok()) << sidecar.status();
    sidecars_[i] = std::move(*sidecar);
    stubs_[i] = v1::Sidecar::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", sidecars_[i]->port()), grpc::InsecureChannelCredentials()));
    admins_[i] = v1::SidecarAdmin::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", sidecars_[i]->port()), grpc::InsecureChannelCredentials()));
  }

  void TearDown() override {
    for (auto& sidecar : sidecars_) {
      if (sidecar != nullptr) {
        EXPECT_TRUE(sidecar->Shutdown(1000).ok());
      }
    }
    if (ledger_ != nullptr) {
      EXPECT_TRUE(ledger_->Shutdown(1000).ok());
    }
  }

  MapStore& store() { return coordination_->store(); }

  v1::Command Open() const { return testing::OpenAccountCommand(x_, 100); }

  // Submits as a client would: a shard whose lease renewal is late (a loaded machine, a
  // 2 s lease) refuses for the moment with NOT_LEASED, writing nothing, and is asked again;
  // the answer that counts is the one after it. At most 20 tries, 250 ms apart.
  absl::StatusOr<v1::SubmitResponse> Submit(int shard, const v1::Command& c) {
    absl::StatusOr<v1::SubmitResponse> answer = testing::SubmitTo(*stubs_[shard], c, kTenant);
    for (int i = 0; i < 20 && ReasonOf(answer.status()) == "NOT_LEASED"; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
      answer = testing::SubmitTo(*stubs_[shard], c, kTenant);
    }
    return answer;
  }

  MoveOptions Options(bool abort = false) {
    MoveOptions options;
    options.first = slot_;
    options.last = slot_;
    options.to = abort ? "" : "s1";
    options.abort = abort;
    options.drain_timeout_ms = 2'000;
    options.ack_timeout_ms = 5'000;
    return options;
  }

  absl::StatusOr<MoveReport> Move(const MoveOptions& options, MapStore& through) {
    return MoveSlots(options, through, GrpcShardAdmins(identity_), RealClock::Get());
  }

  std::unique_ptr<testing::EtcdCluster> etcd_;
  std::unique_ptr<EtcdCoordination> coordination_;
  std::string dir_;
  OperatorIdentity identity_;
  std::unique_ptr<LedgerServer> ledger_;
  std::unique_ptr<v1::Effects::Stub> effects_;
  std::unique_ptr<SidecarServer> sidecars_[2];
  std::unique_ptr<v1::Sidecar::Stub> stubs_[2];
  std::unique_ptr<v1::SidecarAdmin::Stub> admins_[2];
  std::string x_;
  const std::string y_ = "payee";
  uint32_t slot_ = 0;
};

// Finding 1. `store_for_abort` is the store the abort writes through.
class AbortAfterTheFlip : public ReshardEtcdTest {
 protected:
  // The move copies; an abort reads the frozen map; before its write, the move flips, the
  // new owner takes a command of the slot and goes down.
  absl::StatusOr<MoveReport> Race(MapStore& store_for_abort) {
    MoveOptions to_copy = Options();
    to_copy.stop_after = "copy";
    absl::StatusOr<MoveReport> copied = Move(to_copy, store());
    EXPECT_TRUE(copied.ok()) << copied.status();
    HookMapStore late(store_for_abort, [this] {
      MoveOptions flip = Options();
      flip.stop_after = "flip";
      absl::StatusOr<MoveReport> flipped = Move(flip, store());
      EXPECT_TRUE(flipped.ok()) << flipped.status();
      absl::StatusOr<v1::SubmitResponse> served = Submit(1, PayY("pay-x-again"));
      EXPECT_TRUE(served.ok()) << served.status();
      EXPECT_TRUE(sidecars_[1]->Shutdown(1000).ok());
      sidecars_[1].reset();
    });
    return Move(Options(/*abort=*/true), late);
  }

};

TEST_F(AbortAfterTheFlip, IsRefusedAndTheOldOwnerNeverTakesTheSlotBack) {
  absl::StatusOr<MoveReport> aborted = Race(store());
  EXPECT_EQ(ReasonOf(aborted.status()), "ALREADY_FLIPPED") << aborted.status();
  EXPECT_EQ(store().Read()->OwnerOf(slot_), "s1");
  absl::StatusOr<v1::SubmitResponse> again = Submit(0, PayY("pay-x-again"));
  EXPECT_EQ(ReasonOf(again.status()), "SLOT_MOVED") << again.status();
  EXPECT_EQ(testing::EffectsOf(*effects_, "pay-x-again"), 1);
}

TEST_F(AbortAfterTheFlip, NegativeControlWithoutThePredecessorCompareTheSlotHasTwoOwners) {
  BlindMapStore blind(store());
  absl::StatusOr<MoveReport> aborted = Race(blind);
  ASSERT_TRUE(aborted.ok()) << aborted.status();
  EXPECT_EQ(aborted->outcome, "rolled back");
  // The old owner takes the slot back and applies the payment the new owner applied.
  absl::StatusOr<v1::SubmitResponse> again = Submit(0, PayY("pay-x-again"));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->disposition(), v1::APPLIED);
  EXPECT_EQ(testing::EffectsOf(*effects_, "pay-x-again"), 2);  // what the test above catches
}

// Finding 2: the second mover runs whole between the first's read and its freeze.
class TwoMovers : public ReshardEtcdTest {
 protected:
  absl::StatusOr<MoveReport> Race(MapStore& first_through) {
    HookMapStore racing(first_through, [this] {
      absl::StatusOr<MoveReport> second = Move(Options(), store());
      EXPECT_TRUE(second.ok()) << second.status();
      EXPECT_EQ(second->outcome, "moved");
    });
    return Move(Options(), racing);
  }
};

TEST_F(TwoMovers, OneWinsAndTheOtherFindsTheMoveDone) {
  absl::StatusOr<MoveReport> first = Race(store());
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->outcome, "already there");
  EXPECT_EQ(first->lost_races, 1);
  SlotMap map = *store().Read();
  EXPECT_EQ(map.OwnerOf(slot_), "s1");
  EXPECT_TRUE(map.proto().migrations().empty());
  // The new owner answers the duplicate from the moved record.
  absl::StatusOr<v1::SubmitResponse> again = Submit(1, PayY("pay-x"));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->disposition(), v1::REPLAYED);
  EXPECT_EQ(testing::EffectsOf(*effects_, "pay-x"), 1);

  // An import of the slot now (a late page of a run that lost) is refused by its owner.
  grpc::ClientContext context;
  context.AddMetadata(kTenantHeader, kTenant);
  context.AddMetadata(kOperatorHeader, "root");
  v1::ImportSlotsRequest late;
  late.set_first_slot(slot_);
  late.set_last_slot(slot_);
  v1::ImportSlotsResponse response;
  grpc::Status refused = admins_[1]->ImportSlots(&context, late, &response);
  EXPECT_EQ(ReasonOf(FromGrpcStatus(refused, &context)), "SLOTS_NOT_MOVING_HERE");
}

TEST_F(TwoMovers, NegativeControlWithoutThePredecessorCompareTheDuplicateIsAppliedAgain) {
  BlindMapStore blind(store());
  absl::StatusOr<MoveReport> first = Race(blind);
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<v1::SubmitResponse> again = Submit(1, PayY("pay-x"));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->disposition(), v1::APPLIED);
  EXPECT_EQ(testing::EffectsOf(*effects_, "pay-x"), 2);  // what the test above catches
}

}  // namespace
}  // namespace eonce
