// Two shards of real binaries' servers (a ledger behind a sidecar each) over loopback with
// real RocksDB, sharing one slot map (in the in-memory coordination store; the etcd one is
// exercised by reshard_etcd_test): a sidecar refuses a command whose slot the other
// shard owns before writing anything and names the owner; only a platform operator may
// hand a sidecar a new map; and the agent routes every command to its slot's owner,
// following a map change through the refusal it gets under a stale map.
#include <cstdio>
#include <fstream>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/base/clock.h"
#include "common/rpc/grpc_status.h"
#include "common/base/random.h"
#include "common/coord/memory_map_store.h"
#include "common/coord/slots.h"
#include "common/base/status.h"
#include "dedupe_sidecar/doors/sidecar_service.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "outbox_agent/doors/agent_server.h"
#include "outbox_agent/client/client.h"
#include "services/ledger/ledger_service.h"
#include "tests/integration/ledger_calls.h"
#include "tests/util/agent_wait.h"
#include "tests/util/temp_dir.h"

namespace eonce {
namespace {

constexpr char kTenant[] = "acme";
constexpr int kShards = 2;

struct Shard {
  std::unique_ptr<ShardLease> lease;  // outlives the sidecar
  std::unique_ptr<LedgerServer> ledger;
  std::unique_ptr<SidecarServer> sidecar;
  std::unique_ptr<v1::Sidecar::Stub> stub;
  std::unique_ptr<v1::SidecarAdmin::Stub> admin;
  std::unique_ptr<ledger::v1::Ledger::Stub> direct;
  std::string address;
};

class ShardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string dir = testing::FreshDir("shards");
    policy_file_ = dir + "/policy";
    std::ofstream(policy_file_) << "act acme * *\nallow acme * *\n"
                                   "operator acme ops\nplatform acme root\n";
    // The sidecars' ports are known only once they listen: they start under a map whose
    // addresses are placeholders, then adopt one that names them.
    std::vector<v1::ShardInfo> placeholders;
    for (int i = 0; i < kShards; ++i) placeholders.push_back(Info(i, "pending:1"));
    absl::StatusOr<SlotMap> first = store_.CompareAndSwap(0, *SlotMap::Even(placeholders));
    ASSERT_TRUE(first.ok());
    for (int i = 0; i < kShards; ++i) {
      Shard& shard = shards_[i];
      LedgerServerOptions ledger_options;
      ledger_options.data_dir = testing::FreshDir(absl::StrCat("ledger", i));
      auto ledger = LedgerServer::Start(ledger_options, RealClock::Get());
      ASSERT_TRUE(ledger.ok()) << ledger.status();
      shard.ledger = std::move(*ledger);
      SidecarServerOptions options = testing::SidecarOptionsFor(
          shard.ledger->port(), testing::FreshDir(absl::StrCat("sidecar", i)));
      options.retention = RetentionOptions{3'600'000, 7'200'000};
      options.policy_file = policy_file_;
      options.shard_id = absl::StrCat("s", i);
      shard.lease = store_.NewLease(MemoryLeaseOptions{60'000, 1'000});
      options.map_store = &store_;
      options.shard_lease = shard.lease.get();
      auto sidecar = SidecarServer::Start(options, RealClock::Get());
      ASSERT_TRUE(sidecar.ok()) << sidecar.status();
      shard.sidecar = std::move(*sidecar);
      shard.address = absl::StrCat("127.0.0.1:", shard.sidecar->port());
      auto channel = grpc::CreateChannel(shard.address, grpc::InsecureChannelCredentials());
      shard.stub = v1::Sidecar::NewStub(channel);
      shard.admin = v1::SidecarAdmin::NewStub(channel);
      shard.direct = ledger::v1::Ledger::NewStub(grpc::CreateChannel(
          absl::StrCat("127.0.0.1:", shard.ledger->port()), grpc::InsecureChannelCredentials()));
    }
    std::vector<v1::ShardInfo> real;
    for (int i = 0; i < kShards; ++i) real.push_back(Info(i, shards_[i].address));
    absl::StatusOr<SlotMap> named = store_.CompareAndSwap(first->epoch(), *SlotMap::Even(real));
    ASSERT_TRUE(named.ok());
    map_ = std::make_unique<SlotMap>(*std::move(named));
    // Each sidecar reads it from the store, and serves once it acknowledged it.
    for (Shard& shard : shards_) {
      ASSERT_TRUE(shard.sidecar->AwaitShardServing(map_->epoch(), absl::Seconds(30)));
    }
  }

  void TearDown() override {
    for (Shard& shard : shards_) {
      if (shard.sidecar != nullptr) {
        EXPECT_TRUE(shard.sidecar->Shutdown(1000).ok());
      }
      if (shard.ledger != nullptr) {
        EXPECT_TRUE(shard.ledger->Shutdown(1000).ok());
      }
    }
  }

  static v1::ShardInfo Info(int i, const std::string& address) {
    v1::ShardInfo info;
    info.set_id(absl::StrCat("s", i));
    info.set_address(address);
    return info;
  }

  absl::Status Adopt(Shard& shard, const SlotMap& map, const std::string& operator_name) {
    grpc::ClientContext context;
    context.AddMetadata(kTenantHeader, kTenant);
    context.AddMetadata(kOperatorHeader, operator_name);
    v1::AdoptSlotMapRequest request;
    *request.mutable_map() = map.proto();
    request.set_drain_timeout_ms(5'000);
    v1::AdoptSlotMapResponse response;
    grpc::Status status = shard.admin->AdoptSlotMap(&context, request, &response);
    return status.ok() ? absl::OkStatus() : FromGrpcStatus(status, &context);
  }

  // The index of the shard that owns account `id`'s slot.
  int OwnerOf(const std::string& id) const {
    const std::string& owner = map_->OwnerOf(SlotOf(kTenant, "account", id));
    return owner == "s0" ? 0 : 1;
  }

  // An account id whose slot shard `shard` owns, the first after `after`.
  std::string AccountOn(int shard, int after = 0) const {
    for (int n = after;; ++n) {
      std::string id = absl::StrCat("acct-", n);
      if (OwnerOf(id) == shard) return id;
    }
  }

  static v1::Command Open(const std::string& id) { return testing::OpenAccountCommand(id, 100); }

  MemoryMapStore store_{RealClock::Get()};
  std::string policy_file_;
  Shard shards_[kShards];
  std::unique_ptr<SlotMap> map_;
};

TEST_F(ShardTest, ACommandForAnotherShardsSlotIsRefusedBeforeAnythingIsWritten) {
  const std::string id = AccountOn(1);
  absl::StatusOr<v1::SubmitResponse> refused = testing::SubmitTo(*shards_[0].stub, Open(id));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(ReasonOf(refused.status()), "SLOT_MOVED");
  auto facts = ErrorMetadataOf(refused.status());
  EXPECT_EQ(facts["owner"], "s1");
  EXPECT_EQ(facts["owner_address"], shards_[1].address);
  EXPECT_EQ(facts["epoch"], absl::StrCat(map_->epoch()));
  // Nothing was written on shard 0: no record (a lookup without the entity reads the
  // store), and no account.
  grpc::ClientContext lookup;
  lookup.AddMetadata(kTenantHeader, kTenant);
  v1::ReconcileRequest by_key;
  by_key.set_idempotency_key(Open(id).idempotency_key());
  v1::ReconcileResponse found;
  ASSERT_TRUE(shards_[0].stub->Reconcile(&lookup, by_key, &found).ok());
  EXPECT_EQ(found.state(), v1::RECORD_NOT_SEEN);
  EXPECT_EQ(testing::BalanceOf(*shards_[0].direct, id), -1);
  EXPECT_EQ(shards_[0].sidecar->deduper().stats().forwards.load(), 0);
  // A lookup that names the entity is refused like the command.
  grpc::ClientContext named;
  named.AddMetadata(kTenantHeader, kTenant);
  *by_key.mutable_entity() = Open(id).entity();
  grpc::Status status = shards_[0].stub->Reconcile(&named, by_key, &found);
  EXPECT_EQ(ReasonOf(FromGrpcStatus(status, &named)), "SLOT_MOVED");

  // The owner takes it.
  absl::StatusOr<v1::SubmitResponse> applied = testing::SubmitTo(*shards_[1].stub, Open(id));
  ASSERT_TRUE(applied.ok()) << applied.status();
  EXPECT_EQ(applied->disposition(), v1::APPLIED);
  EXPECT_EQ(testing::BalanceOf(*shards_[1].direct, id), 100);
}

TEST_F(ShardTest, EverySidecarServesTheMapItHolds) {
  for (Shard& shard : shards_) {
    grpc::ClientContext context;
    v1::SlotMap served;
    ASSERT_TRUE(shard.stub->GetSlotMap(&context, v1::GetSlotMapRequest(), &served).ok());
    EXPECT_EQ(served.SerializeAsString(), map_->proto().SerializeAsString());
  }
  // What an operator sees with sidecarctl.
  std::string out;
  FILE* pipe = popen(("dedupe_sidecar/sidecarctl --sidecar=" + shards_[1].address +
                      " --tenant=acme slots 2>&1")
                         .c_str(),
                     "r");
  ASSERT_NE(pipe, nullptr);
  char buffer[512];
  while (fgets(buffer, sizeof(buffer), pipe) != nullptr) out += buffer;
  EXPECT_EQ(pclose(pipe), 0) << out;
  EXPECT_NE(out.find(absl::StrCat("epoch ", map_->epoch(), "\n")), std::string::npos) << out;
  EXPECT_NE(out.find("slots 512-1023 s1\n"), std::string::npos) << out;
  EXPECT_NE(out.find("shard s1 " + shards_[1].address), std::string::npos) << out;
}

TEST_F(ShardTest, OnlyAPlatformOperatorMayChangeTheMap) {
  absl::StatusOr<SlotMap> frozen = BeginMove(*map_, 0, 9, "s1");
  ASSERT_TRUE(frozen.ok());
  absl::StatusOr<SlotMap> stored = store_.CompareAndSwap(map_->epoch(), *frozen);
  ASSERT_TRUE(stored.ok()) << stored.status();
  absl::Status tenant_operator = Adopt(shards_[0], *stored, "ops");
  EXPECT_EQ(tenant_operator.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(ReasonOf(tenant_operator), "PLATFORM_OPERATOR_REQUIRED");
  ASSERT_TRUE(Adopt(shards_[0], *stored, "root").ok());
  EXPECT_EQ(shards_[0].sidecar->shards()->map()->epoch(), stored->epoch());
  // An older map pushed changes nothing: the store's current map stays held.
  EXPECT_TRUE(Adopt(shards_[0], *map_, "root").ok());
  EXPECT_EQ(shards_[0].sidecar->shards()->map()->epoch(), stored->epoch());
}

// A pushed map is only a hint of the epoch to reach: a map the store does not hold (a
// stale tool's, a forged one, one with a huge epoch) is never adopted, and the contents
// adopted are the store's, whatever the push said.
TEST_F(ShardTest, APushedMapIsAdoptedOnlyAsTheStoreHoldsIt) {
  // A map one step ahead that no mover wrote: s0 would give slots 0-9 to s1.
  absl::StatusOr<SlotMap> unwritten = BeginMove(*map_, 0, 9, "s1");
  ASSERT_TRUE(unwritten.ok());
  absl::Status refused = Adopt(shards_[0], *unwritten, "root");
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_EQ(ReasonOf(refused), "NOT_IN_STORE");
  EXPECT_EQ(shards_[0].sidecar->shards()->map()->epoch(), map_->epoch());
  // A huge epoch would have shut every later real map out.
  v1::SlotMap huge = unwritten->proto();
  huge.set_epoch(1'000'000);
  absl::StatusOr<SlotMap> forged = SlotMap::FromProto(huge);
  ASSERT_TRUE(forged.ok());
  EXPECT_EQ(ReasonOf(Adopt(shards_[0], *forged, "root")), "NOT_IN_STORE");
  // The store moves on; a push naming that epoch with other contents (slots 0-9 to s1
  // flipped, which the store never said) brings the store's contents.
  absl::StatusOr<SlotMap> stored = store_.CompareAndSwap(map_->epoch(), *unwritten);
  ASSERT_TRUE(stored.ok()) << stored.status();
  absl::StatusOr<SlotMap> flipped = FinishMove(*stored, 0, 9);
  ASSERT_TRUE(flipped.ok());
  v1::SlotMap other = flipped->proto();
  other.set_epoch(stored->epoch());
  absl::StatusOr<SlotMap> lie = SlotMap::FromProto(other);
  ASSERT_TRUE(lie.ok());
  ASSERT_TRUE(Adopt(shards_[0], *lie, "root").ok());
  std::shared_ptr<const SlotMap> held = shards_[0].sidecar->shards()->map();
  EXPECT_EQ(held->proto().SerializeAsString(), stored->proto().SerializeAsString());
  EXPECT_EQ(held->OwnerOf(0), "s0");
}

TEST_F(ShardTest, TheAgentSendsEachCommandToItsSlotsOwnerAndFollowsAMove) {
  AgentServerOptions options;
  options.data_dir = testing::FreshDir("agent");
  options.tenant = kTenant;
  options.actor = "alice";
  options.routes = absl::StrCat("eonce.ledger.v1.Ledger=sharded:", shards_[0].address);
  options.idle_pump_ms = 5;
  options.replay.retry.max_age_ms = 1'000'000;
  options.replay.retry.retention_margin_ms = 600'000;
  options.replay.retry.base_backoff_ms = 10;
  options.replay.retry.max_backoff_ms = 200;
  auto agent = AgentServer::Start(options, RealClock::Get(), RealRandom::Get());
  ASSERT_TRUE(agent.ok()) << agent.status();
  auto client = AgentClient::Connect(absl::StrCat("127.0.0.1:", (*agent)->port()));

  std::vector<std::string> ids;
  for (int i = 0; i < 12; ++i) ids.push_back(absl::StrCat("routed-", i));
  for (const std::string& id : ids) ASSERT_TRUE(client->Enqueue(Open(id)).ok());
  for (const std::string& id : ids) {
    auto record = testing::WaitUntilFinal(client->stub(), "open-" + id);
    ASSERT_TRUE(record.ok()) << record.status();
    EXPECT_EQ(record->state(), v1::ACKED) << id;
    const int owner = OwnerOf(id);
    EXPECT_EQ(testing::BalanceOf(*shards_[owner].direct, id), 100) << id;
    EXPECT_EQ(testing::BalanceOf(*shards_[1 - owner].direct, id), -1) << id;
  }
  // Every command went straight to its owner: none was refused.
  for (Shard& shard : shards_) EXPECT_EQ(shard.sidecar->deduper().stats().slot_moved.load(), 0);

  // An operator moves the slot of a new account to the other shard (nothing of it to
  // copy yet); the agent still holds the first map.
  const std::string moved = AccountOn(0, 1000);
  const uint32_t slot = SlotOf(kTenant, "account", moved);
  // Each step is written to the store, then pushed (a push only names the epoch to reach).
  absl::StatusOr<SlotMap> frozen = BeginMove(*map_, slot, slot, "s1");
  ASSERT_TRUE(frozen.ok());
  frozen = store_.CompareAndSwap(map_->epoch(), *frozen);
  ASSERT_TRUE(frozen.ok()) << frozen.status();
  absl::StatusOr<SlotMap> flipped = FinishMove(*frozen, slot, slot);
  ASSERT_TRUE(flipped.ok());
  flipped = store_.CompareAndSwap(frozen->epoch(), *flipped);
  ASSERT_TRUE(flipped.ok()) << flipped.status();
  for (const SlotMap* step : {&*frozen, &*flipped}) {
    for (Shard& shard : shards_) ASSERT_TRUE(Adopt(shard, *step, "root").ok());
  }
  ASSERT_TRUE(client->Enqueue(Open(moved)).ok());
  auto record = testing::WaitUntilFinal(client->stub(), "open-" + moved);
  ASSERT_TRUE(record.ok()) << record.status();
  EXPECT_EQ(record->state(), v1::ACKED);
  EXPECT_EQ(testing::BalanceOf(*shards_[1].direct, moved), 100);
  EXPECT_EQ(testing::BalanceOf(*shards_[0].direct, moved), -1);
  // It got there through the old owner's refusal, which made the agent ask for the map.
  EXPECT_GE(shards_[0].sidecar->deduper().stats().slot_moved.load(), 1);
  EXPECT_GE(record->attempt(), 2u);
  ASSERT_TRUE((*agent)->Shutdown(1000).ok());
}

}  // namespace
}  // namespace eonce
