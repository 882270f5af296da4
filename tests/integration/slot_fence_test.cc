// The fence where the effect commits, end to end over loopback with real stores: a
// sharded sidecar's forward carries the command's slot and the epoch of its map, the
// ledger keeps the slot's fence at it, and a forward below a raised fence is refused with
// nothing applied, which the sidecar keeps as no outcome (the next attempt is forwarded
// again, never answered from a stored refusal). And an unsharded sidecar names the
// command's entity, so that the ledger files the command's inbox entry under its slot
// (it moves with the slot once the deployment is sharded).
#include <fstream>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/base/clock.h"
#include "common/command/command.h"
#include "common/rpc/grpc_status.h"
#include "common/coord/memory_map_store.h"
#include "common/coord/slots.h"
#include "common/base/status.h"
#include "dedupe_sidecar/doors/sidecar_service.h"
#include "eonce/internal/records.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "services/ledger/ledger_service.h"
#include "tests/integration/ledger_calls.h"
#include "tests/util/temp_dir.h"

namespace eonce {
namespace {

constexpr char kTenant[] = "acme";
// The epoch of the map the sidecar holds (any epoch above 1 tells it from a default).
constexpr uint64_t kEpoch = 5;

class SlotFenceTest : public ::testing::Test {
 protected:
  // A ledger, and a sidecar in front of it: sharded (one shard owning every slot, at
  // kEpoch) or not.
  void Start(bool sharded) {
    LedgerServerOptions ledger_options;
    ledger_options.data_dir = testing::FreshDir("slot-fence-ledger");
    auto ledger = LedgerServer::Start(ledger_options, RealClock::Get());
    ASSERT_TRUE(ledger.ok()) << ledger.status();
    ledger_ = std::move(*ledger);
    SidecarServerOptions options =
        testing::SidecarOptionsFor(ledger_->port(), testing::FreshDir("slot-fence-sidecar"));
    if (sharded) {
      v1::ShardInfo only;
      only.set_id("s0");
      only.set_address("127.0.0.1:1");
      absl::StatusOr<SlotMap> map = SlotMap::Even({only});
      ASSERT_TRUE(map.ok()) << map.status();
      // The store's revision is the epoch: write the map until it stands at kEpoch.
      for (uint64_t epoch = 0; epoch < kEpoch;) {
        absl::StatusOr<SlotMap> written = store_.CompareAndSwap(epoch, *map);
        ASSERT_TRUE(written.ok()) << written.status();
        epoch = written->epoch();
      }
      options.shard_id = "s0";
      lease_ = store_.NewLease(MemoryLeaseOptions{60'000, 1'000});
      options.map_store = &store_;
      options.shard_lease = lease_.get();
    }
    auto sidecar = SidecarServer::Start(options, RealClock::Get());
    ASSERT_TRUE(sidecar.ok()) << sidecar.status();
    sidecar_ = std::move(*sidecar);
    if (sharded) {
      ASSERT_TRUE(sidecar_->AwaitShardServing(kEpoch, absl::Seconds(30)));
    }
    sidecar_stub_ = v1::Sidecar::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", sidecar_->port()), grpc::InsecureChannelCredentials()));
    auto business = grpc::CreateChannel(absl::StrCat("127.0.0.1:", ledger_->port()),
                                        grpc::InsecureChannelCredentials());
    slot_data_ = v1::SlotData::NewStub(business);
    ledger_stub_ = ledger::v1::Ledger::NewStub(business);
  }

  void TearDown() override {
    if (sidecar_ != nullptr) {
      EXPECT_TRUE(sidecar_->Shutdown(1000).ok());
    }
    if (ledger_ != nullptr) {
      EXPECT_TRUE(ledger_->Shutdown(1000).ok());
    }
  }

  // ExportSlotData of `slot` at `epoch`, straight to the ledger, as a sidecar calls it.
  absl::StatusOr<v1::ExportSlotDataResponse> Export(uint32_t slot, uint64_t epoch) {
    grpc::ClientContext context;
    context.AddMetadata(kComponentHeader, kSidecarComponent);
    v1::ExportSlotDataRequest request;
    request.set_first_slot(slot);
    request.set_last_slot(slot);
    request.set_epoch(epoch);
    v1::ExportSlotDataResponse response;
    grpc::Status status = slot_data_->ExportSlotData(&context, request, &response);
    if (!status.ok()) return FromGrpcStatus(status, &context);
    return response;
  }

  MemoryMapStore store_{RealClock::Get()};
  std::unique_ptr<ShardLease> lease_;
  std::unique_ptr<LedgerServer> ledger_;
  std::unique_ptr<SidecarServer> sidecar_;
  std::unique_ptr<v1::Sidecar::Stub> sidecar_stub_;
  std::unique_ptr<v1::SlotData::Stub> slot_data_;
  std::unique_ptr<ledger::v1::Ledger::Stub> ledger_stub_;
};

TEST_F(SlotFenceTest, AForwardBelowTheSlotsFenceAppliesNothingAndLeavesNoOutcome) {
  Start(/*sharded=*/true);
  const uint32_t slot = SlotOf(kTenant, "account", "alice");
  ASSERT_TRUE(testing::SubmitTo(*sidecar_stub_, testing::OpenAccountCommand("alice", 100)).ok());
  // The forward carried the map's epoch: the ledger's fence of the slot is at it, so a move
  // step of an older epoch is refused there.
  EXPECT_TRUE(IsSlotFenced(Export(slot, kEpoch - 1).status()));

  // The slot moves on (its export at a newer epoch), while this sidecar still holds the
  // old map: its next forward for the slot is refused by the ledger.
  ASSERT_TRUE(Export(slot, kEpoch + 1).ok());
  ledger::v1::TransferRequest transfer;
  transfer.set_from("alice");
  transfer.set_to("alice2");
  transfer.set_amount(10);
  v1::Command late = testing::LedgerCommand("late-1", testing::kTransferMethod,
                                            transfer.SerializeAsString(), "", "alice");
  for (int attempt = 0; attempt < 2; ++attempt) {
    absl::StatusOr<v1::SubmitResponse> answer = testing::SubmitTo(*sidecar_stub_, late);
    ASSERT_FALSE(answer.ok()) << attempt;
    // Retryable, not a stored business answer: every attempt is forwarded again.
    EXPECT_EQ(answer.status().code(), absl::StatusCode::kUnavailable) << answer.status();
    EXPECT_NE(answer.status().message().find("is fenced"), std::string::npos)
        << answer.status();
  }
  EXPECT_EQ(sidecar_->deduper().stats().forwards.load(), 3);
  EXPECT_EQ(testing::BalanceOf(*ledger_stub_, "alice"), 100);
}

TEST_F(SlotFenceTest, AnUnshardedSidecarNamesTheEntitySoTheInboxEntryIsFiledUnderItsSlot) {
  Start(/*sharded=*/false);
  const uint32_t slot = SlotOf(kTenant, "account", "alice");
  ASSERT_TRUE(testing::SubmitTo(*sidecar_stub_, testing::OpenAccountCommand("alice", 100)).ok());
  auto exported = Export(slot, 1);
  ASSERT_TRUE(exported.ok()) << exported.status();
  bool entry = false;
  for (const std::string& bytes : exported->rows()) {
    internal::SlotRow row;
    ASSERT_TRUE(row.ParseFromString(bytes));
    entry |= row.column_family() == "inbox" && row.key().find("open-alice") != std::string::npos;
  }
  EXPECT_TRUE(entry) << "the command's inbox entry does not move with its slot";
}

}  // namespace
}  // namespace eonce
