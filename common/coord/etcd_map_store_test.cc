// EtcdMapStore and EtcdShardLease against real etcd members (tests/util/etcd_cluster.h).
// Leases are 2 s (etcd's shortest); nothing here asserts on elapsed time: a lapse is
// awaited by watching the shard key's deletion, and the serving window is computed on a
// ManualClock.
#include "common/coord/etcd_map_store.h"

#include <signal.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/base/clock.h"
#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "common/coord/etcd_client.h"
#include "common/coord/etcd_flags.h"
#include "common/coord/seed.h"
#include "common/base/status.h"
#include "gtest/gtest.h"
#include "tests/util/etcd_cluster.h"
#include "tests/util/temp_dir.h"
#include "tests/util/test_pki.h"

ABSL_DECLARE_FLAG(std::string, etcd_endpoints);
ABSL_DECLARE_FLAG(std::string, etcd_prefix);
ABSL_DECLARE_FLAG(int64_t, lease_ttl_ms);
ABSL_DECLARE_FLAG(int64_t, etcd_timeout_ms);
ABSL_DECLARE_FLAG(std::string, etcd_tls_cert);

namespace eonce {
namespace {

using testing::EtcdCluster;

constexpr int64_t kTtlMs = 2'000;

v1::ShardInfo Shard(const std::string& id) {
  v1::ShardInfo shard;
  shard.set_id(id);
  shard.set_address(absl::StrCat(id, ".local:7000"));
  return shard;
}

SlotMap TwoShards() { return *SlotMap::Even({Shard("s0"), Shard("s1")}); }

// A map different from `map`: one more slot of s0 moving to s1.
SlotMap Step(const SlotMap& map, uint32_t slot) { return *BeginMove(map, slot, slot, "s1"); }

std::unique_ptr<EtcdCoordination> Connect(const std::string& endpoints,
                                          const std::string& prefix, Clock& clock,
                                          int64_t call_timeout_ms = 1'000) {
  EtcdCoordOptions options;
  options.endpoints = endpoints;
  options.prefix = prefix;
  options.lease_ttl_ms = kTtlMs;
  options.call_timeout_ms = call_timeout_ms;
  auto coord = EtcdCoordination::Create(options, clock);
  EXPECT_TRUE(coord.ok()) << coord.status();
  return std::move(*coord);
}

// Waits (bounded) until etcd deletes `key`: a lease that lapsed, seen as it happens.
void AwaitDeleted(EtcdClient& client, const std::string& key) {
  for (int round = 0; round < 20; ++round) {
    etcdserverpb::RangeRequest range;
    range.set_key(key);
    auto current = client.Range(range);
    ASSERT_TRUE(current.ok()) << current.status();
    if (current->kvs_size() == 0) return;
    auto watched = client.WatchOnce(key, current->kvs(0).mod_revision() + 1, 10'000);
    ASSERT_TRUE(watched.ok()) << watched.status();
  }
  FAIL() << key << " was never deleted";
}

class EtcdMapStoreTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto cluster = EtcdCluster::Start(1);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = cluster->release();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(cluster_, nullptr);
    static int tests = 0;
    prefix_ = absl::StrCat("/eonce/test", ++tests);
    coord_ = Connect(cluster_->Endpoints(), prefix_, clock_);
    ASSERT_NE(coord_, nullptr);
  }

  static EtcdCluster* cluster_;
  ManualClock clock_;
  std::string prefix_;
  std::unique_ptr<EtcdCoordination> coord_;
};

EtcdCluster* EtcdMapStoreTest::cluster_ = nullptr;

TEST(EtcdEndpointsTest, ParsesCommaListsAndRefusesWhatIsNotHostPort) {
  auto endpoints = ParseEtcdEndpoints(" 127.0.0.1:2379, http://h:2380,");
  ASSERT_TRUE(endpoints.ok()) << endpoints.status();
  EXPECT_EQ(*endpoints, (std::vector<std::string>{"127.0.0.1:2379", "h:2380"}));
  for (const char* bad : {"", ",", "host", "host:", "host:0", "host:70000", ":2379"}) {
    EXPECT_EQ(ParseEtcdEndpoints(bad).status().code(), absl::StatusCode::kInvalidArgument)
        << bad;
  }
}

TEST(EtcdCoordinationTest, RefusesBadOptionsNamingTheFlag) {
  ManualClock clock;
  EtcdCoordOptions options;
  options.endpoints = "127.0.0.1:1";
  options.lease_ttl_ms = 1'000;
  auto coord = EtcdCoordination::Create(options, clock);
  EXPECT_EQ(coord.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(coord.status().message().find("--lease_ttl_ms"), absl::string_view::npos);
  options.lease_ttl_ms = kTtlMs;
  options.prefix = "eonce/";
  coord = EtcdCoordination::Create(options, clock);
  EXPECT_NE(coord.status().message().find("--etcd_prefix"), absl::string_view::npos);
}

TEST(EtcdCoordinationTest, FlagsGiveTheOptionsAndTheirMistakesAreNamed) {
  absl::SetFlag(&FLAGS_etcd_endpoints, "127.0.0.1:2379,127.0.0.1:2479");
  absl::SetFlag(&FLAGS_etcd_prefix, "/eonce/prod");
  absl::SetFlag(&FLAGS_lease_ttl_ms, 6'000);
  absl::SetFlag(&FLAGS_etcd_timeout_ms, 1'500);
  EtcdCoordOptions options = EtcdCoordOptionsFromFlags();
  EXPECT_EQ(options.endpoints, "127.0.0.1:2379,127.0.0.1:2479");
  EXPECT_EQ(options.prefix, "/eonce/prod");
  EXPECT_EQ(options.lease_ttl_ms, 6'000);
  EXPECT_EQ(options.call_timeout_ms, 1'500);
  EXPECT_FALSE(options.tls.enabled());
  ManualClock clock;
  EXPECT_TRUE(EtcdCoordination::Create(options, clock).ok());

  absl::SetFlag(&FLAGS_etcd_tls_cert, "/nonexistent/cert.pem");
  auto coord = EtcdCoordination::Create(EtcdCoordOptionsFromFlags(), clock);
  EXPECT_EQ(coord.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(coord.status().message().find("--etcd_tls_cert"), absl::string_view::npos)
      << coord.status();
  absl::SetFlag(&FLAGS_etcd_tls_cert, "");
  absl::SetFlag(&FLAGS_etcd_timeout_ms, 0);
  coord = EtcdCoordination::Create(EtcdCoordOptionsFromFlags(), clock);
  EXPECT_NE(coord.status().message().find("--etcd_timeout_ms"), absl::string_view::npos)
      << coord.status();
}

TEST(LeaseServeUntilTest, StopsAMarginBeforeEtcdCouldExpireTheLease) {
  // Sent at 1000 with a 10 s TTL: etcd expires no earlier than 11000.
  EXPECT_EQ(LeaseServeUntilMs(1'000, 10'000), 1'000 + 9'900 - 1'000);
  EXPECT_LT(LeaseServeUntilMs(1'000, kTtlMs), 1'000 + kTtlMs);
}

TEST_F(EtcdMapStoreTest, ReadBeforeSeedIsNotFoundAndSeedWritesOnlyOnce) {
  auto none = coord_->store().Read();
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ReasonOf(none.status()), "NO_SLOT_MAP");

  auto seeded = SeedSlotMap(coord_->store(), TwoShards());
  ASSERT_TRUE(seeded.ok()) << seeded.status();
  EXPECT_GT(seeded->epoch(), 0u);
  // A second seed, with another map, leaves the first in place and returns it.
  auto again = SeedSlotMap(coord_->store(), Step(TwoShards(), 0));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->epoch(), seeded->epoch());
  EXPECT_EQ(again->ToJson(), seeded->ToJson());
}

TEST_F(EtcdMapStoreTest, EpochIsTheKeysModRevisionAndGrowsWithEachChange) {
  auto first = coord_->store().CompareAndSwap(0, TwoShards());
  ASSERT_TRUE(first.ok()) << first.status();
  etcdserverpb::RangeRequest range;
  range.set_key(SlotMapKey(prefix_));
  auto raw = coord_->client().Range(range);
  ASSERT_TRUE(raw.ok()) << raw.status();
  ASSERT_EQ(raw->kvs_size(), 1);
  EXPECT_EQ(first->epoch(), static_cast<uint64_t>(raw->kvs(0).mod_revision()));
  // Stored with its epoch left out: the revision is the only epoch there is.
  EXPECT_EQ(raw->kvs(0).value().find("\"epoch\":\"1\""), std::string::npos);

  auto second = coord_->store().CompareAndSwap(first->epoch(), Step(*first, 0));
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_GT(second->epoch(), first->epoch());
  auto read = coord_->store().Read();
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->epoch(), second->epoch());
  EXPECT_EQ(read->ToJson(), second->ToJson());

  // A write from a stale epoch, or a second seed, changes nothing.
  auto stale = coord_->store().CompareAndSwap(first->epoch(), Step(*first, 1));
  EXPECT_EQ(stale.status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(ReasonOf(stale.status()), "EPOCH_CHANGED");
  auto reseed = coord_->store().CompareAndSwap(0, TwoShards());
  EXPECT_EQ(ReasonOf(reseed.status()), "EPOCH_CHANGED");
  read = coord_->store().Read();
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->epoch(), second->epoch());
}

TEST_F(EtcdMapStoreTest, TwoWritersFromOneEpochOneWins) {
  auto seeded = SeedSlotMap(coord_->store(), TwoShards());
  ASSERT_TRUE(seeded.ok()) << seeded.status();
  // Two processes: each its own client and connection.
  std::unique_ptr<EtcdCoordination> other = Connect(cluster_->Endpoints(), prefix_, clock_);
  std::atomic<bool> go{false};
  absl::StatusOr<SlotMap> a = absl::UnknownError("not run");
  absl::StatusOr<SlotMap> b = absl::UnknownError("not run");
  std::thread ta([&] {
    while (!go.load()) {
    }
    a = coord_->store().CompareAndSwap(seeded->epoch(), Step(*seeded, 0));
  });
  std::thread tb([&] {
    while (!go.load()) {
    }
    b = other->store().CompareAndSwap(seeded->epoch(), Step(*seeded, 1));
  });
  go = true;
  ta.join();
  tb.join();
  ASSERT_NE(a.ok(), b.ok()) << a.status() << " / " << b.status();
  const absl::StatusOr<SlotMap>& winner = a.ok() ? a : b;
  const absl::StatusOr<SlotMap>& loser = a.ok() ? b : a;
  EXPECT_EQ(loser.status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(ReasonOf(loser.status()), "EPOCH_CHANGED");
  auto read = coord_->store().Read();
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->epoch(), winner->epoch());
  EXPECT_EQ(read->ToJson(), winner->ToJson());
}

TEST_F(EtcdMapStoreTest, WaitNewerSeesAChangeAndCatchesUpAfterBeingAway) {
  auto seeded = SeedSlotMap(coord_->store(), TwoShards());
  ASSERT_TRUE(seeded.ok()) << seeded.status();
  auto nothing = coord_->store().WaitNewer(seeded->epoch(), 300);
  EXPECT_EQ(nothing.status().code(), absl::StatusCode::kDeadlineExceeded);

  absl::StatusOr<SlotMap> seen = absl::UnknownError("not run");
  std::thread waiter([&] { seen = coord_->store().WaitNewer(seeded->epoch(), 30'000); });
  auto changed = coord_->store().CompareAndSwap(seeded->epoch(), Step(*seeded, 0));
  ASSERT_TRUE(changed.ok()) << changed.status();
  waiter.join();
  ASSERT_TRUE(seen.ok()) << seen.status();
  EXPECT_EQ(seen->epoch(), changed->epoch());
  EXPECT_EQ(seen->ToJson(), changed->ToJson());

  // Away for three changes: the wait returns the newest at once.
  SlotMap last = *changed;
  for (uint32_t slot = 1; slot <= 3; ++slot) {
    auto next = coord_->store().CompareAndSwap(last.epoch(), Step(last, slot));
    ASSERT_TRUE(next.ok()) << next.status();
    last = *next;
  }
  auto caught_up = coord_->store().WaitNewer(changed->epoch(), 30'000);
  ASSERT_TRUE(caught_up.ok()) << caught_up.status();
  EXPECT_EQ(caught_up->epoch(), last.epoch());
}

TEST_F(EtcdMapStoreTest, WaitNewerCatchesUpPastACompaction) {
  auto seeded = SeedSlotMap(coord_->store(), TwoShards());
  ASSERT_TRUE(seeded.ok()) << seeded.status();
  SlotMap last = *seeded;
  for (uint32_t slot = 0; slot < 3; ++slot) {
    auto next = coord_->store().CompareAndSwap(last.epoch(), Step(last, slot));
    ASSERT_TRUE(next.ok()) << next.status();
    last = *next;
  }
  ASSERT_TRUE(cluster_->Compact(static_cast<int64_t>(last.epoch())).ok());
  // The revisions after `seeded` are gone from etcd's history; the wait still finds the map.
  auto caught_up = coord_->store().WaitNewer(seeded->epoch(), 30'000);
  ASSERT_TRUE(caught_up.ok()) << caught_up.status();
  EXPECT_EQ(caught_up->epoch(), last.epoch());
  // And, from the newest, there is nothing newer.
  auto nothing = coord_->store().WaitNewer(last.epoch(), 300);
  EXPECT_EQ(nothing.status().code(), absl::StatusCode::kDeadlineExceeded);
}

// A map as large as the slot map rules allow for its shards: 256 shards with long names
// and addresses, about 100 KB of JSON.
SlotMap LargeMap() {
  std::vector<v1::ShardInfo> shards;
  for (int i = 0; i < 256; ++i) {
    v1::ShardInfo shard;
    shard.set_id(absl::StrCat("shard-", std::string(50, 'a'), "-", i));
    shard.set_address(absl::StrCat(std::string(240, 'h'), ".local:", 7000 + i));
    shards.push_back(shard);
  }
  return *SlotMap::Even(shards);
}

TEST_F(EtcdMapStoreTest, WaitNewerCatchesUpThroughMoreHistoryThanOneMessageHolds) {
  const SlotMap large = LargeMap();
  ASSERT_GT(large.ToJson().size(), 90'000u);
  auto seeded = SeedSlotMap(coord_->store(), large);
  ASSERT_TRUE(seeded.ok()) << seeded.status();
  // More than kMaxEtcdMessageBytes of maps written while the caller was away.
  uint64_t last = seeded->epoch();
  const int changes = kMaxEtcdMessageBytes / 90'000 + 4;
  for (int i = 0; i < changes; ++i) {
    auto next = coord_->store().CompareAndSwap(last, large);
    ASSERT_TRUE(next.ok()) << next.status();
    last = next->epoch();
  }
  auto caught_up = coord_->store().WaitNewer(seeded->epoch(), 30'000);
  ASSERT_TRUE(caught_up.ok()) << caught_up.status();
  EXPECT_EQ(caught_up->epoch(), last);
  // With no time to wait, a look at the current map.
  auto now = coord_->store().WaitNewer(seeded->epoch(), 0);
  ASSERT_TRUE(now.ok()) << now.status();
  EXPECT_EQ(now->epoch(), last);
  EXPECT_EQ(coord_->store().WaitNewer(last, 0).status().code(),
            absl::StatusCode::kDeadlineExceeded);
}

TEST_F(EtcdMapStoreTest, SecondHolderIsRefusedUntilTheFirstReleases) {
  auto first = coord_->NewLease();
  auto second = coord_->NewLease();
  ASSERT_TRUE(first->Acquire("s0", "a:1").ok());
  absl::Status refused = second->Acquire("s0", "b:1");
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ReasonOf(refused), "SHARD_HELD");
  EXPECT_NE(refused.message().find("a:1"), absl::string_view::npos) << refused;
  EXPECT_EQ(second->ServeUntilMs(), 0);
  // Another shard is free.
  ASSERT_TRUE(second->Acquire("s1", "b:1").ok());
  first->Release();
  EXPECT_EQ(first->ServeUntilMs(), 0);
  auto third = coord_->NewLease();
  ASSERT_TRUE(third->Acquire("s0", "c:1").ok());
}

TEST_F(EtcdMapStoreTest, SecondHolderGetsTheShardOnceTheFirstsLeaseLapses) {
  auto crashed = coord_->NewLease();
  ASSERT_TRUE(crashed->Acquire("s0", "a:1").ok());
  crashed.reset();  // gone without Release, as a crash
  auto next = coord_->NewLease();
  EXPECT_EQ(ReasonOf(next->Acquire("s0", "b:1")), "SHARD_HELD");
  AwaitDeleted(coord_->client(), ShardKey(prefix_, "s0"));
  ASSERT_TRUE(next->Acquire("s0", "b:1").ok());
  auto presence = coord_->store().Presence("s0");
  ASSERT_TRUE(presence.ok()) << presence.status();
  EXPECT_EQ(presence->address, "b:1");
}

TEST_F(EtcdMapStoreTest, PresenceShowsTheAcknowledgedEpochAndEndsWithTheLease) {
  auto absent = coord_->store().Presence("s0");
  ASSERT_TRUE(absent.ok()) << absent.status();
  EXPECT_FALSE(absent->live);

  auto lease = coord_->NewLease();
  ASSERT_TRUE(lease->Acquire("s0", "a:1").ok());
  auto presence = coord_->store().Presence("s0");
  ASSERT_TRUE(presence.ok()) << presence.status();
  EXPECT_TRUE(presence->live);
  EXPECT_EQ(presence->held_epoch, 0u);
  EXPECT_EQ(presence->address, "a:1");

  ASSERT_TRUE(lease->Acknowledge(41).ok());
  presence = coord_->store().Presence("s0");
  ASSERT_TRUE(presence.ok()) << presence.status();
  EXPECT_TRUE(presence->live);
  EXPECT_EQ(presence->held_epoch, 41u);

  const int64_t lease_id = lease->lease_id();
  ASSERT_TRUE(coord_->client().LeaseRevoke(lease_id).ok());  // etcd ends it under us
  presence = coord_->store().Presence("s0");
  ASSERT_TRUE(presence.ok()) << presence.status();
  EXPECT_FALSE(presence->live);
  EXPECT_EQ(ReasonOf(lease->Renew()), "LEASE_LOST");
  EXPECT_EQ(lease->ServeUntilMs(), 0);
}

TEST_F(EtcdMapStoreTest, PresenceEndsWhenTheLeaseLapses) {
  auto lease = coord_->NewLease();
  ASSERT_TRUE(lease->Acquire("s0", "a:1").ok());
  ASSERT_TRUE(lease->Acknowledge(7).ok());
  lease.reset();  // no more renewals
  AwaitDeleted(coord_->client(), ShardKey(prefix_, "s0"));
  auto presence = coord_->store().Presence("s0");
  ASSERT_TRUE(presence.ok()) << presence.status();
  EXPECT_FALSE(presence->live);
}

TEST_F(EtcdMapStoreTest, AcknowledgeAfterALapseNeverOverwritesTheNextHolder) {
  auto stale = coord_->NewLease();
  ASSERT_TRUE(stale->Acquire("s0", "a:1").ok());
  ASSERT_TRUE(coord_->client().LeaseRevoke(stale->lease_id()).ok());
  auto next = coord_->NewLease();
  ASSERT_TRUE(next->Acquire("s0", "b:1").ok());
  ASSERT_TRUE(next->Acknowledge(5).ok());

  absl::Status late = stale->Acknowledge(9);
  EXPECT_EQ(late.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(ReasonOf(late), "LEASE_LOST");
  auto presence = coord_->store().Presence("s0");
  ASSERT_TRUE(presence.ok()) << presence.status();
  EXPECT_EQ(presence->address, "b:1");
  EXPECT_EQ(presence->held_epoch, 5u);
}

TEST_F(EtcdMapStoreTest, ServeUntilFollowsTheSendTimeOfEachAnsweredRenewal) {
  auto lease = coord_->NewLease();
  EXPECT_EQ(lease->ServeUntilMs(), 0);
  const int64_t acquired_at = clock_.NowMs();
  ASSERT_TRUE(lease->Acquire("s0", "a:1").ok());
  EXPECT_EQ(lease->ServeUntilMs(), LeaseServeUntilMs(acquired_at, kTtlMs));
  // Strictly before etcd's expiry, which counts the TTL from after the send.
  EXPECT_LT(lease->ServeUntilMs(), acquired_at + kTtlMs);
  auto ttl = coord_->client().LeaseTimeToLive(lease->lease_id());
  ASSERT_TRUE(ttl.ok()) << ttl.status();
  EXPECT_EQ(ttl->grantedttl() * 1000, kTtlMs);

  clock_.AdvanceMs(600);
  const int64_t renewed_at = clock_.NowMs();
  ASSERT_TRUE(lease->Renew().ok());
  EXPECT_EQ(lease->ServeUntilMs(), LeaseServeUntilMs(renewed_at, kTtlMs));
  EXPECT_LT(lease->ServeUntilMs(), renewed_at + kTtlMs);
}

// The clusters below are the tests' own: they kill and stop members.

TEST(EtcdOutageTest, ServeUntilStopsGrowingWhileEtcdIsDownOrStopped) {
  auto cluster = EtcdCluster::Start(1);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ManualClock clock;
  // Long enough for a reconnect after the restart below (gRPC backs off up to 1 s + 20%).
  auto coord = Connect((*cluster)->Endpoints(), "/eonce/outage", clock, 5'000);
  auto lease = coord->NewLease();
  ASSERT_TRUE(lease->Acquire("s0", "a:1").ok());
  const int64_t held_until = lease->ServeUntilMs();

  (*cluster)->Kill(0);
  clock.AdvanceMs(500);
  absl::Status killed = lease->Renew();
  EXPECT_EQ(killed.code(), absl::StatusCode::kUnavailable) << killed;
  EXPECT_EQ(lease->ServeUntilMs(), held_until);
  EXPECT_EQ(coord->store().Read().status().code(), absl::StatusCode::kUnavailable);

  // etcd back on its data dir: the same client reconnects, and the lease lived on (a
  // restarted leader gives every lease a full TTL again).
  ASSERT_TRUE((*cluster)->Restart(0).ok());
  EXPECT_EQ(coord->store().Read().status().code(), absl::StatusCode::kNotFound);
  clock.AdvanceMs(500);
  ASSERT_TRUE(lease->Renew().ok());
  const int64_t renewed_until = lease->ServeUntilMs();
  EXPECT_EQ(renewed_until, LeaseServeUntilMs(clock.NowMs(), kTtlMs));

  // Stopped (last: the lease may lapse while etcd's clock runs on and ours waits).
  (*cluster)->Stop(0);
  clock.AdvanceMs(500);
  absl::Status stopped = lease->Renew();
  EXPECT_EQ(stopped.code(), absl::StatusCode::kUnavailable) << stopped;
  EXPECT_EQ(lease->ServeUntilMs(), renewed_until);
  (*cluster)->Continue(0);
}

TEST(EtcdOutageTest, ThreeMembersKeepServingWithOneKilled) {
  auto cluster = EtcdCluster::Start(3);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ManualClock clock;
  // The first endpoint is the member every call starts at. Calls may wait out an election.
  auto coord = Connect((*cluster)->Endpoints(), "/eonce/failover", clock, 10'000);
  auto seeded = SeedSlotMap(coord->store(), TwoShards());
  ASSERT_TRUE(seeded.ok()) << seeded.status();
  auto lease = coord->NewLease();
  ASSERT_TRUE(lease->Acquire("s0", "a:1").ok());

  (*cluster)->Kill(0);
  auto read = coord->store().Read();
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->epoch(), seeded->epoch());
  clock.AdvanceMs(500);
  ASSERT_TRUE(lease->Renew().ok());
  EXPECT_EQ(lease->ServeUntilMs(), LeaseServeUntilMs(clock.NowMs(), kTtlMs));
  auto changed = coord->store().CompareAndSwap(seeded->epoch(), Step(*seeded, 0));
  ASSERT_TRUE(changed.ok()) << changed.status();
  auto seen = coord->store().WaitNewer(seeded->epoch(), 30'000);
  ASSERT_TRUE(seen.ok()) << seen.status();
  EXPECT_EQ(seen->epoch(), changed->epoch());
  ASSERT_TRUE(lease->Acknowledge(changed->epoch()).ok());

  // Back on its data dir, the member catches up and serves the newest map itself.
  ASSERT_TRUE((*cluster)->Restart(0).ok());
  auto alone = Connect((*cluster)->ClientAddress(0), "/eonce/failover", clock, 10'000);
  auto caught_up = alone->store().Read();
  ASSERT_TRUE(caught_up.ok()) << caught_up.status();
  EXPECT_EQ(caught_up->epoch(), changed->epoch());
}

TEST(EtcdOutageTest, AStoppedMemberIsLeftForTheNextAfterOneTimeout) {
  auto cluster = EtcdCluster::Start(3);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ManualClock clock;
  auto coord = Connect((*cluster)->Endpoints(), "/eonce/stopped", clock, 5'000);
  auto seeded = SeedSlotMap(coord->store(), TwoShards());
  ASSERT_TRUE(seeded.ok()) << seeded.status();

  (*cluster)->Stop(0);
  // The call that meets the stopped member may time out; the next goes to another member.
  absl::StatusOr<SlotMap> read = coord->store().Read();
  if (!read.ok()) {
    EXPECT_EQ(read.status().code(), absl::StatusCode::kUnavailable) << read.status();
    read = coord->store().Read();
  }
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->epoch(), seeded->epoch());
  (*cluster)->Continue(0);
}

TEST(EtcdOutageTest, AWaitOnAMemberThatLostItsLeaderEndsUnavailable) {
  auto cluster = EtcdCluster::Start(3);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ManualClock clock;
  auto coord = Connect((*cluster)->ClientAddress(0), "/eonce/leaderless", clock, 5'000);
  auto seeded = SeedSlotMap(coord->store(), TwoShards());
  ASSERT_TRUE(seeded.ok()) << seeded.status();
  // Member 0 alone: no quorum, so no leader (a leader that loses its quorum steps down).
  (*cluster)->Stop(1);
  (*cluster)->Stop(2);
  // Without asking for a leader, the watch would sit quiet for the whole minute and end
  // DEADLINE_EXCEEDED ("no newer map"), which the caller would read as "nothing changed".
  auto waited = coord->store().WaitNewer(seeded->epoch(), 60'000);
  EXPECT_EQ(waited.status().code(), absl::StatusCode::kUnavailable) << waited.status();
  (*cluster)->Continue(1);
  (*cluster)->Continue(2);
}

TEST(EtcdTlsTest, MutualTlsReachesAClusterThatRequiresIt) {
  auto pki = testing::TestPki::Create(testing::FreshDir("pki"), "etcd-test-ca");
  ASSERT_TRUE(pki.ok()) << pki.status();
  testing::EtcdTls tls;
  auto server = pki->Issue("etcd", "");
  auto client = pki->Issue("sidecar", "spiffe://eonce.test/eonce/sidecar");
  ASSERT_TRUE(server.ok() && client.ok());
  tls.server = *server;
  tls.client = *client;
  auto cluster = EtcdCluster::Start(1, 60'000, &tls);
  ASSERT_TRUE(cluster.ok()) << cluster.status();

  ManualClock clock;
  EtcdCoordOptions options;
  options.endpoints = (*cluster)->Endpoints();
  options.lease_ttl_ms = kTtlMs;
  options.call_timeout_ms = 2'000;
  options.tls = tls.client;
  auto coord = EtcdCoordination::Create(options, clock);
  ASSERT_TRUE(coord.ok()) << coord.status();
  auto seeded = SeedSlotMap((*coord)->store(), TwoShards());
  ASSERT_TRUE(seeded.ok()) << seeded.status();
  auto lease = (*coord)->NewLease();
  ASSERT_TRUE(lease->Acquire("s0", "a:1").ok());

  // Plaintext is refused by a cluster that requires client certificates.
  options.tls = TlsFiles{};
  auto plain = EtcdCoordination::Create(options, clock);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ((*plain)->store().Read().status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace eonce
