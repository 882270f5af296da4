// Live resharding of the sidecars' idempotency records (tools/reshard/mover.h), with real
// sidecars over loopback and real RocksDB, the slot map and the shards' leases in the
// in-memory coordination store. Two shards stand in front of one ledger (the
// business's data is shared, as with an external database), which runs in legacy mode:
// it keeps no inbox, so only the sidecars' records stand between a duplicate and a second
// effect, and a move that loses them is seen as a second effect.
#include <fstream>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/base/clock.h"
#include "common/rpc/grpc_status.h"
#include "common/coord/blind_map_store.h"
#include "common/coord/memory_map_store.h"
#include "common/coord/slots.h"
#include "common/base/status.h"
#include "dedupe_sidecar/doors/sidecar_service.h"
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

// A ShardAdmin that imports nothing: the negative control of a move that skips copying
// the idempotency records.
class SkipsTheCopy : public ShardAdmin {
 public:
  explicit SkipsTheCopy(std::unique_ptr<ShardAdmin> real) : real_(std::move(real)) {}
  absl::StatusOr<uint64_t> Adopt(const SlotMap& map, int64_t drain_timeout_ms) override {
    return real_->Adopt(map, drain_timeout_ms);
  }
  absl::StatusOr<v1::ExportSlotsResponse> Export(const v1::ExportSlotsRequest& r) override {
    return real_->Export(r);
  }
  absl::StatusOr<int64_t> Import(const v1::ImportSlotsRequest& r) override {
    return r.records_size();
  }
  absl::StatusOr<int64_t> Drop(uint32_t first, uint32_t last, uint64_t epoch) override {
    return real_->Drop(first, last, epoch);
  }
  absl::StatusOr<v1::SlotMap> Held() override { return real_->Held(); }

 private:
  std::unique_ptr<ShardAdmin> real_;
};

class ReshardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string dir = testing::FreshDir("reshard");
    std::ofstream(dir + "/policy") << "act acme * *\nallow acme * *\nplatform acme root\n";
    LedgerServerOptions ledger_options;
    ledger_options.data_dir = testing::FreshDir("ledger");
    ledger_options.legacy_mode = true;
    auto ledger = LedgerServer::Start(ledger_options, RealClock::Get());
    ASSERT_TRUE(ledger.ok()) << ledger.status();
    ledger_ = std::move(*ledger);
    auto to_ledger = grpc::CreateChannel(absl::StrCat("127.0.0.1:", ledger_->port()),
                                         grpc::InsecureChannelCredentials());
    direct_ = ledger::v1::Ledger::NewStub(to_ledger);
    effects_ = v1::Effects::NewStub(to_ledger);

    absl::Status started = testing::StartShardedSidecars(
        store_, 2,
        [&](int i) {
          SidecarServerOptions options = testing::SidecarOptionsFor(
              ledger_->port(), testing::FreshDir(absl::StrCat("s", i)));
          options.policy_file = dir + "/policy";
          return options;
        },
        leases_, sidecars_, stubs_);
    ASSERT_TRUE(started.ok()) << started;
    identity_.tenant = kTenant;
    identity_.operator_name = "root";
    // Accounts in s0's slots: "x" is the one that moves, "y" stays.
    x_ = AccountOn("s0", 0);
    y_ = AccountOn("s0", SlotOf(kTenant, "account", x_) + 1, /*other_slot_than=*/x_);
    slot_ = SlotOf(kTenant, "account", x_);
    for (const std::string& id : {x_, y_}) {
      ASSERT_TRUE(Submit(0, OpenCommand(id)).ok());
    }
    auto moved = Submit(0, TransferCommand(7));
    ASSERT_TRUE(moved.ok()) << moved.status();
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

  // An account id on `shard`'s slots, in another slot than `other_slot_than`'s.
  std::string AccountOn(const std::string& shard, int start,
                        const std::string& other_slot_than = "") {
    SlotMap map = *store_.Read();
    for (int n = start;; ++n) {
      std::string id = absl::StrCat("acct-", n);
      uint32_t slot = SlotOf(kTenant, "account", id);
      if (map.OwnerOf(slot) != shard) continue;
      if (!other_slot_than.empty() && slot == SlotOf(kTenant, "account", other_slot_than)) {
        continue;
      }
      return id;
    }
  }

  static v1::Command OpenCommand(const std::string& id) {
    return testing::OpenAccountCommand(id, 100);
  }

  // A transfer of `amount` from x to y: a command on x's entity.
  v1::Command TransferCommand(int64_t amount) {
    ledger::v1::TransferRequest t;
    t.set_from(x_);
    t.set_to(y_);
    t.set_amount(amount);
    return testing::LedgerCommand("pay-x", testing::kTransferMethod, t.SerializeAsString(), "", x_);
  }

  absl::StatusOr<v1::SubmitResponse> Submit(int shard, const v1::Command& c) {
    return testing::SubmitTo(*stubs_[shard], c, kTenant);
  }

  MoveOptions Options(uint32_t first, uint32_t last, const std::string& to) {
    MoveOptions options;
    options.first = first;
    options.last = last;
    options.to = to;
    options.drain_timeout_ms = 2'000;
    options.page_records = 1;  // a page a record: the copy pages through them
    return options;
  }

  absl::StatusOr<MoveReport> Move(const MoveOptions& options, bool skip_copy = false,
                                  MapStore* store = nullptr) {
    ShardAdminFactory real = GrpcShardAdmins(identity_);
    ShardAdminFactory admins = real;
    if (skip_copy) {
      admins = [real](const std::string& address) -> std::unique_ptr<ShardAdmin> {
        return std::make_unique<SkipsTheCopy>(real(address));
      };
    }
    return MoveSlots(options, store != nullptr ? *store : store_, admins, RealClock::Get());
  }

  // The duplicates of x's two commands, sent to `shard`: each answered from a record
  // (REPLAYED), and the ledger holds each effect once, balances as after the first.
  void ExpectDuplicatesAnsweredOnce(int shard) {
    for (const v1::Command& c : {OpenCommand(x_), TransferCommand(7)}) {
      absl::StatusOr<v1::SubmitResponse> again = Submit(shard, c);
      ASSERT_TRUE(again.ok()) << again.status();
      EXPECT_EQ(again->disposition(), v1::REPLAYED) << c.command_id();
      EXPECT_EQ(testing::EffectsOf(*effects_, c.command_id()), 1) << c.command_id();
    }
    EXPECT_EQ(testing::BalanceOf(*direct_, x_), 93);
    EXPECT_EQ(testing::BalanceOf(*direct_, y_), 107);
  }

  MemoryMapStore store_{RealClock::Get()};
  std::unique_ptr<ShardLease> leases_[2];  // outlive the sidecars
  OperatorIdentity identity_;
  std::unique_ptr<LedgerServer> ledger_;
  std::unique_ptr<ledger::v1::Ledger::Stub> direct_;
  std::unique_ptr<v1::Effects::Stub> effects_;
  std::unique_ptr<SidecarServer> sidecars_[2];
  std::unique_ptr<v1::Sidecar::Stub> stubs_[2];
  std::string x_, y_;
  uint32_t slot_ = 0;
};

TEST_F(ReshardTest, AMovedSlotsDuplicatesAreAnsweredFromTheMovedRecordsOnItsNewShard) {
  absl::StatusOr<MoveReport> report = Move(Options(slot_, slot_, "s1"));
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->outcome, "moved");
  EXPECT_EQ(report->copied, 2);   // x's open and its transfer
  EXPECT_EQ(report->dropped, 2);  // the old owner's copies, once the new owner had them
  EXPECT_GE(report->frozen_ms, 0);
  SlotMap map = *store_.Read();
  EXPECT_EQ(report->epoch, map.epoch());
  EXPECT_EQ(map.OwnerOf(slot_), "s1");
  EXPECT_TRUE(map.proto().migrations().empty());
  for (auto& sidecar : sidecars_) EXPECT_EQ(sidecar->shards()->map()->epoch(), map.epoch());

  ExpectDuplicatesAnsweredOnce(1);
  // The old owner sends the slot's commands to the new one, and keeps nothing of them.
  absl::StatusOr<v1::SubmitResponse> redirected = Submit(0, TransferCommand(7));
  EXPECT_EQ(ReasonOf(redirected.status()), "SLOT_MOVED");
  EXPECT_EQ(ErrorMetadataOf(redirected.status())["owner"], "s1");
  // y's slot did not move: s0 still answers its duplicates.
  absl::StatusOr<v1::SubmitResponse> stays = Submit(0, OpenCommand(y_));
  ASSERT_TRUE(stays.ok()) << stays.status();
  EXPECT_EQ(stays->disposition(), v1::REPLAYED);
  // Moving it again is a no-op.
  absl::StatusOr<MoveReport> again = Move(Options(slot_, slot_, "s1"));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->outcome, "already there");
}

// The negative control: a move that skips copying the records is seen as a second effect.
TEST_F(ReshardTest, NegativeControlAMoveThatSkipsTheRecordsIsCaught) {
  absl::StatusOr<MoveReport> report = Move(Options(slot_, slot_, "s1"), /*skip_copy=*/true);
  ASSERT_TRUE(report.ok()) << report.status();
  absl::StatusOr<v1::SubmitResponse> again = Submit(1, TransferCommand(7));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->disposition(), v1::APPLIED);
  EXPECT_EQ(testing::EffectsOf(*effects_, "pay-x"), 2);  // what the check above catches
}

TEST_F(ReshardTest, AMoveStoppedAtAnyStepFinishesWhenRunAgain) {
  for (const char* step : {"freeze", "copy", "flip", "drop"}) {
    SCOPED_TRACE(step);
    SlotMap before = *store_.Read();
    const std::string to = before.OwnerOf(slot_) == "s0" ? "s1" : "s0";
    const int to_index = to == "s0" ? 0 : 1;
    MoveOptions options = Options(slot_, slot_, to);
    options.stop_after = step;
    absl::StatusOr<MoveReport> stopped = Move(options);
    ASSERT_TRUE(stopped.ok()) << stopped.status();
    EXPECT_EQ(stopped->outcome, absl::StrCat("stopped after ", step));
    if (std::string(step) == "freeze" || std::string(step) == "copy") {
      // Frozen: neither shard takes the slot's commands, and says to retry.
      for (int shard = 0; shard < 2; ++shard) {
        absl::StatusOr<v1::SubmitResponse> refused = Submit(shard, TransferCommand(7));
        EXPECT_EQ(ReasonOf(refused.status()), "SLOT_MIGRATING") << shard;
        EXPECT_TRUE(RetryAfterOf(refused.status()).has_value());
      }
    }
    options.stop_after.clear();
    absl::StatusOr<MoveReport> finished = Move(options);
    ASSERT_TRUE(finished.ok()) << finished.status();
    EXPECT_EQ(finished->outcome, "moved");
    EXPECT_EQ(store_.Read()->OwnerOf(slot_), to);
    EXPECT_TRUE(store_.Read()->proto().migrations().empty());
    ExpectDuplicatesAnsweredOnce(to_index);
  }
}

TEST_F(ReshardTest, AnAbortedMoveLeavesTheSlotWhereItWas) {
  MoveOptions options = Options(slot_, slot_, "s1");
  options.stop_after = "copy";
  ASSERT_TRUE(Move(options).ok());
  MoveOptions abort = Options(slot_, slot_, "");
  abort.abort = true;
  absl::StatusOr<MoveReport> rolled = Move(abort);
  ASSERT_TRUE(rolled.ok()) << rolled.status();
  EXPECT_EQ(rolled->outcome, "rolled back");
  EXPECT_EQ(rolled->dropped, 2);  // the new owner's partial copy
  SlotMap map = *store_.Read();
  EXPECT_EQ(map.OwnerOf(slot_), "s0");
  EXPECT_TRUE(map.proto().migrations().empty());
  ExpectDuplicatesAnsweredOnce(0);
  EXPECT_EQ(ReasonOf(Submit(1, TransferCommand(7)).status()), "SLOT_MOVED");
}

TEST_F(ReshardTest, OnlyAPlatformOperatorMayMoveSlots) {
  identity_.operator_name = "someone";
  absl::StatusOr<MoveReport> refused = Move(Options(slot_, slot_, "s1"));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied);
  // The freeze was published but no sidecar adopted it; the platform operator finishes.
  identity_.operator_name = "root";
  absl::StatusOr<MoveReport> finished = Move(Options(slot_, slot_, "s1"));
  ASSERT_TRUE(finished.ok()) << finished.status();
  ExpectDuplicatesAnsweredOnce(1);
}

}  // namespace
}  // namespace eonce
