#include "services/inbox/inbox.h"

#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/store/crash_fs.h"
#include "common/base/status.h"
#include "gtest/gtest.h"
#include "tests/util/crash.h"
#include "tests/util/temp_dir.h"

namespace eonce {
namespace {

class CrashAfterApply : public FaultInjector {
 public:
  absl::Status Hit(FaultPoint point) override {
    if (armed && point == FaultPoint::kAfterApplyBeforeResponse) {
      return absl::AbortedError("crash after apply");
    }
    return absl::OkStatus();
  }
  bool armed = true;
};

class InboxTest : public ::testing::Test {
 protected:
  void Open(bool legacy, FaultInjector* faults = nullptr,
            int64_t retention_ms = Inbox::kDefaultEntryRetentionMs) {
    inbox_.reset();
    store_.reset();
    auto store = RocksStore::Open(dir_, Inbox::ColumnFamilies(clock_), StoreOptions());
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    inbox_ = std::make_unique<Inbox>(*store_, clock_, legacy, faults, retention_ms);
  }

  // A counter effect: each apply adds one to "applies" and records an effect.
  absl::StatusOr<v1::CallResult> Apply(const std::string& command_id) {
    CallIdentity id;
    id.command_id = command_id;
    id.tenant = "acme";
    return inbox_->Run(id, {"counter"}, [&](rocksdb::WriteBatch*, uint64_t) -> absl::StatusOr<Applied> {
      Applied applied;
      applies_.fetch_add(1);
      applied.result.set_response("response-of-" + command_id + "-" +
                                  std::to_string(applies_.load()));
      v1::Effect effect;
      effect.set_entity("counter/1");
      effect.set_method("/test.Counter/Add");
      applied.effect = effect;
      return applied;
    });
  }

  // A keyed call, as the sidecar forwards it: command id, key and payload hash.
  absl::StatusOr<v1::CallResult> ApplyKeyed(const std::string& command_id,
                                            const std::string& key,
                                            const std::string& payload_sha256) {
    CallIdentity id;
    id.command_id = command_id;
    id.tenant = "acme";
    id.idempotency_key = key;
    id.payload_sha256 = payload_sha256;
    return inbox_->Run(id, {"counter"}, [&](rocksdb::WriteBatch*, uint64_t) -> absl::StatusOr<Applied> {
      Applied applied;
      applies_.fetch_add(1);
      applied.result.set_response("response-of-" + command_id);
      v1::Effect effect;
      effect.set_entity("counter/1");
      applied.effect = effect;
      return applied;
    });
  }

  int EffectsFor(const std::string& command_id) {
    auto page = inbox_->ListEffects(0, 10000);
    EXPECT_TRUE(page.ok());
    int n = 0;
    for (const auto& e : page->effects()) n += e.command_id() == command_id;
    return n;
  }

  std::string dir_ = testing::FreshDir("inbox");
  ManualClock clock_;
  std::atomic<int> applies_{0};
  std::unique_ptr<RocksStore> store_;
  std::unique_ptr<Inbox> inbox_;
};

TEST_F(InboxTest, SequentialRepeatHasOneEffectAndTheSameResult) {
  Open(/*legacy=*/false);
  auto first = Apply("c1");
  auto second = Apply("c1");
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(first->SerializeAsString(), second->SerializeAsString());
  EXPECT_EQ(applies_.load(), 1);
  EXPECT_EQ(EffectsFor("c1"), 1);
}

TEST_F(InboxTest, ConcurrentRepeatsHaveOneEffect) {
  Open(/*legacy=*/false);
  std::vector<std::thread> threads;
  std::vector<std::string> responses(8);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        auto r = Apply("same");
        ASSERT_TRUE(r.ok());
        if (i == 0) responses[t] = r->response();
        EXPECT_EQ(r->response(), responses[t]);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(applies_.load(), 1);
  EXPECT_EQ(EffectsFor("same"), 1);
  for (const auto& r : responses) EXPECT_EQ(r, responses[0]);
}

TEST_F(InboxTest, LegacyModeAppliesEveryCall) {
  Open(/*legacy=*/true);
  ASSERT_TRUE(Apply("c1").ok());
  ASSERT_TRUE(Apply("c1").ok());
  EXPECT_EQ(applies_.load(), 2);
  EXPECT_EQ(EffectsFor("c1"), 2);
  EXPECT_EQ(inbox_->QueryOutcome("acme", "c1").status().code(),
            absl::StatusCode::kUnimplemented);
}

// The inbox is the commit point when the sidecar forwards before its own record is
// durable: should the sidecar forget a key, the inbox still refuses its reuse.
TEST_F(InboxTest, AKeyBelongsToItsFirstCommandAndPayload) {
  Open(/*legacy=*/false);
  const std::string hash(32, 'h');
  ASSERT_TRUE(ApplyKeyed("c1", "k1", hash).ok());
  // The same command again: the stored answer.
  auto repeat = ApplyKeyed("c1", "k1", hash);
  ASSERT_TRUE(repeat.ok()) << repeat.status();
  EXPECT_EQ(repeat->response(), "response-of-c1");
  // Another command under the key, or the command with another payload: refused, nothing
  // applied. The command under another key is still the same command: its stored answer.
  auto other_command = ApplyKeyed("c2", "k1", hash);
  EXPECT_EQ(other_command.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(ReasonOf(other_command.status()), "KEY_REUSED");
  EXPECT_TRUE(IsKeyConflict(other_command.status()));
  auto other_payload = ApplyKeyed("c1", "k1", std::string(32, 'x'));
  EXPECT_EQ(ReasonOf(other_payload.status()), "IDEMPOTENCY_CONFLICT");
  auto other_key = ApplyKeyed("c1", "k2", hash);
  ASSERT_TRUE(other_key.ok()) << other_key.status();
  EXPECT_EQ(other_key->response(), "response-of-c1");
  // A new command under a payload-conflicting key is refused too, and the key stays its
  // owner's across a restart.
  auto both = ApplyKeyed("c3", "k1", std::string(32, 'x'));
  EXPECT_EQ(ReasonOf(both.status()), "IDEMPOTENCY_CONFLICT");
  Open(/*legacy=*/false);
  EXPECT_EQ(ReasonOf(ApplyKeyed("c4", "k1", hash).status()), "KEY_REUSED");
  EXPECT_EQ(applies_.load(), 1);
  EXPECT_EQ(EffectsFor("c1"), 1);
  EXPECT_EQ(EffectsFor("c2") + EffectsFor("c3") + EffectsFor("c4"), 0);
  // A store error is not a key conflict.
  EXPECT_FALSE(IsKeyConflict(absl::AlreadyExistsError("no reason")));
}

TEST_F(InboxTest, ALegacyInboxComparesNoKeys) {
  Open(/*legacy=*/true);
  ASSERT_TRUE(ApplyKeyed("c1", "k1", std::string(32, 'h')).ok());
  ASSERT_TRUE(ApplyKeyed("c2", "k1", std::string(32, 'x')).ok());
  EXPECT_EQ(applies_.load(), 2);
}

TEST_F(InboxTest, CrashBetweenEffectAndAnswerIsRecoveredExactly) {
  CrashAfterApply faults;
  Open(/*legacy=*/false, &faults);
  auto lost = Apply("c9");
  EXPECT_EQ(lost.status().code(), absl::StatusCode::kAborted);  // the answer never left

  faults.armed = false;
  Open(/*legacy=*/false);  // reopen the database, as after a restart
  auto outcome = inbox_->QueryOutcome("acme", "c9");
  ASSERT_TRUE(outcome.ok());
  EXPECT_TRUE(outcome->applied());
  EXPECT_EQ(outcome->result().response(), "response-of-c9-1");

  auto again = Apply("c9");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->response(), "response-of-c9-1");
  EXPECT_EQ(applies_.load(), 1);
  EXPECT_EQ(EffectsFor("c9"), 1);

  auto unseen = inbox_->QueryOutcome("acme", "never");
  ASSERT_TRUE(unseen.ok());
  EXPECT_FALSE(unseen->applied());
  // Another tenant's command with the same id is a different command.
  auto other_tenant = inbox_->QueryOutcome("globex", "c9");
  ASSERT_TRUE(other_tenant.ok());
  EXPECT_FALSE(other_tenant->applied());
}

TEST_F(InboxTest, EffectSequenceContinuesAfterReopen) {
  Open(false);
  ASSERT_TRUE(Apply("a").ok());
  ASSERT_TRUE(Apply("b").ok());
  Open(false);
  ASSERT_TRUE(Apply("c").ok());
  auto page = inbox_->ListEffects(0, 100);
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->effects_size(), 3);
  EXPECT_GT(page->effects(2).seq(), page->effects(1).seq());
  EXPECT_GT(page->effects(1).seq(), page->effects(0).seq());
  EXPECT_EQ(page->last_seq(), page->effects(2).seq());
  auto after = inbox_->ListEffects(page->effects(1).seq(), 100);
  ASSERT_EQ(after->effects_size(), 1);
  EXPECT_EQ(after->effects(0).command_id(), "c");
}

// Entries live their retention, then go: reads stop seeing them at once, and compaction
// removes them from the disk.
TEST_F(InboxTest, EntriesExpireAfterTheirRetention) {
  constexpr int64_t kRetentionMs = 60'000;
  Open(false, nullptr, kRetentionMs);
  ASSERT_TRUE(Apply("c1").ok());
  clock_.AdvanceMs(kRetentionMs - 1);
  EXPECT_TRUE(inbox_->QueryOutcome("acme", "c1")->applied());
  clock_.AdvanceMs(1);
  EXPECT_FALSE(inbox_->Lookup("acme", "c1")->has_value());
  EXPECT_FALSE(inbox_->QueryOutcome("acme", "c1")->applied());
  rocksdb::CompactRangeOptions compact;
  compact.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForce;
  ASSERT_TRUE(store_->db()->Flush(rocksdb::FlushOptions(), store_->cf("inbox")).ok());
  ASSERT_TRUE(store_->db()->CompactRange(compact, store_->cf("inbox"), nullptr, nullptr).ok());
  std::string raw;
  EXPECT_TRUE(store_->db()
                  ->Get(rocksdb::ReadOptions(), store_->cf("inbox"), std::string("acme") + '\0' + "c1",
                        &raw)
                  .IsNotFound());
  EXPECT_EQ(EffectsFor("c1"), 1);  // the effect ledger is ground truth and stays
}

// Numbers are taken before their batch commits. A reader tailing the ledger must never
// be shown a later effect while an earlier one may still commit, or it would move past
// the earlier one and never see it.
TEST_F(InboxTest, ListEffectsNeverShowsAnEffectPastOneStillCommitting) {
  Open(false);
  absl::Notification entered, release;
  std::thread slow([&] {
    CallIdentity id;
    id.command_id = "slow";
    id.tenant = "acme";
    auto r = inbox_->Run(id, {"x"}, [&](rocksdb::WriteBatch*, uint64_t) -> absl::StatusOr<Applied> {
      entered.Notify();
      release.WaitForNotification();
      Applied applied;
      applied.effect = v1::Effect();
      return applied;
    });
    EXPECT_TRUE(r.ok());
  });
  entered.WaitForNotification();
  ASSERT_TRUE(Apply("fast").ok());  // a higher number, committed first
  auto page = inbox_->ListEffects(0, 100);
  ASSERT_TRUE(page.ok());
  EXPECT_EQ(page->effects_size(), 0);
  EXPECT_EQ(page->last_seq(), 0u);
  release.Notify();
  slow.join();
  page = inbox_->ListEffects(page->last_seq(), 100);
  ASSERT_EQ(page->effects_size(), 2);
  EXPECT_EQ(page->effects(0).command_id(), "slow");
  EXPECT_EQ(page->effects(1).command_id(), "fast");
}

// An answered effect survives a power cut, also when many calls on one entity commit at
// once and share their fsyncs (the locks are released before the sync). The negative
// control skips the wait for durability, and the same check catches it.
class SkipsDurabilityInbox : public Inbox {
 public:
  using Inbox::Inbox;
  void WhenDurable(RocksStore::DurableFn done) override { done(absl::OkStatus()); }
};

// Runs 8 threads x 25 calls on one counter on a crash file system, cuts the power, and
// returns how many answered calls have no effect and no inbox entry after the restart.
template <typename InboxType>
int AnsweredButLostAfterPowerCut() {
  std::shared_ptr<CrashFileSystem> fs = NewCrashFileSystem();
  ManualClock clock;
  const std::string dir = testing::FreshDir("inbox-power");
  StoreOptions options;
  options.env = fs->env();
  auto opened = RocksStore::Open(dir, Inbox::ColumnFamilies(clock), options);
  EXPECT_TRUE(opened.ok()) << opened.status();
  std::unique_ptr<RocksStore> store = std::move(*opened);
  std::vector<std::string> answered;
  absl::Mutex mu;
  {
    InboxType inbox(*store, clock, /*legacy_mode=*/false);
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < 25; ++i) {
          CallIdentity id;
          id.command_id = absl::StrCat("c", t, "-", i);
          id.tenant = "acme";
          auto result = inbox.Run(id, {"counter"}, [](rocksdb::WriteBatch*, uint64_t) {
            Applied applied;
            applied.result.set_response("ok");
            applied.effect = v1::Effect();
            return absl::StatusOr<Applied>(applied);
          });
          if (result.ok()) {
            absl::MutexLock lock(&mu);
            answered.push_back(id.command_id);
          }
        }
      });
    }
    for (auto& thread : threads) thread.join();
  }
  testing::CrashStore(*fs, store);
  opened = RocksStore::Open(dir, Inbox::ColumnFamilies(clock), options);
  EXPECT_TRUE(opened.ok()) << opened.status();
  store = std::move(*opened);
  Inbox after(*store, clock, /*legacy_mode=*/false);
  EXPECT_EQ(answered.size(), 200u);
  int lost = 0;
  for (const std::string& command_id : answered) {
    auto outcome = after.QueryOutcome("acme", command_id);
    if (!outcome.ok() || !outcome->applied()) lost++;
  }
  return lost;
}

TEST(InboxPowerCutTest, EveryAnsweredEffectSurvivesAPowerCut) {
  EXPECT_EQ(AnsweredButLostAfterPowerCut<Inbox>(), 0);
}

TEST(InboxPowerCutTest, NegativeControlAnsweringBeforeTheSyncIsCaught) {
  EXPECT_GT(AnsweredButLostAfterPowerCut<SkipsDurabilityInbox>(), 0);
}

}  // namespace
}  // namespace eonce
