// RocksStore's group commit: WhenDurable calls back only once the caller's writes are on
// disk (at once when they already are, else from the committer after the fsync that
// covers a whole group). A crash file system drops whatever was not synced, so a callback
// that ran early is seen.
#include "common/store/rocks.h"

#include <sys/statvfs.h>

#include <algorithm>
#include <atomic>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/store/crash_fs.h"
#include "gtest/gtest.h"
#include "rocksdb/perf_context.h"
#include "rocksdb/perf_level.h"
#include "tests/util/crash.h"
#include "tests/util/temp_dir.h"

namespace eonce {
namespace {

// Each with the log written at every write (page cache) and buffered until each sync.
class RocksStoreTest : public ::testing::TestWithParam<bool> {
 protected:
  RocksStoreTest() { Open(); }

  void Open() {
    StoreOptions options;
    options.env = fs_->env();
    options.buffer_log_until_sync = GetParam();
    auto store = RocksStore::Open(dir_, {ColumnFamilySpec{"data", {}}}, options);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
  }

  void PutUnsynced(const std::string& key) {
    rocksdb::WriteBatch batch;
    batch.Put(store_->cf("data"), key, "v");
    ASSERT_TRUE(store_->Write(&batch, /*sync=*/false, "test").ok());
  }

  // Writes `key` unsynced and holds the committer in that write's callback until the
  // returned notification is notified.
  std::shared_ptr<absl::Notification> HoldCommitter(const std::string& key) {
    PutUnsynced(key);
    auto release = std::make_shared<absl::Notification>();
    auto holding = std::make_shared<absl::Notification>();
    store_->WhenDurable([holding, release](absl::Status) {
      holding->Notify();
      release->WaitForNotification();
    });
    holding->WaitForNotification();
    return release;
  }

  // Writes `key` unsynced, runs WhenDurableLeadingWhenIdle and waits for its callback;
  // returns whether the callback ran on this thread (this caller led the sync).
  bool LedOnThisThread(const std::string& key) {
    PutUnsynced(key);
    absl::Notification done;
    std::thread::id on;
    store_->WhenDurableLeadingWhenIdle([&](absl::Status durable) {
      EXPECT_TRUE(durable.ok()) << durable;
      on = std::this_thread::get_id();
      done.Notify();
    });
    EXPECT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
    return on == std::this_thread::get_id();
  }

  bool Has(const std::string& key) {
    std::string value;
    return store_->Get("data", key, &value).ok();
  }

  std::shared_ptr<CrashFileSystem> fs_ = NewCrashFileSystem();
  std::string dir_ = testing::FreshDir("rocks");
  std::unique_ptr<RocksStore> store_;
};

TEST_P(RocksStoreTest, AWriteIsDurableWhenItsCallbackRuns) {
  PutUnsynced("one");
  absl::Notification called;
  store_->WhenDurable([&](absl::Status durable) {
    EXPECT_TRUE(durable.ok()) << durable;
    called.Notify();
  });
  called.WaitForNotification();
  // Already durable now: the next wait is answered at once, on this thread.
  bool at_once = false;
  store_->WhenDurable([&](absl::Status durable) { at_once = durable.ok(); });
  EXPECT_TRUE(at_once);
  testing::CrashStore(*fs_, store_);
  Open();
  EXPECT_TRUE(Has("one")) << "the callback ran before the write was durable";
}

TEST_P(RocksStoreTest, EveryCallbackOfManyConcurrentCallersRestsOnADurableWrite) {
  constexpr int kThreads = 8, kWrites = 40;
  std::atomic<int> answered{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kWrites; ++i) {
        std::string key = absl::StrCat("k", t, "-", i);
        PutUnsynced(key);
        absl::Notification done;
        store_->WhenDurable([&](absl::Status durable) {
          EXPECT_TRUE(durable.ok()) << durable;
          answered++;
          done.Notify();
        });
        done.WaitForNotification();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  ASSERT_EQ(answered.load(), kThreads * kWrites);
  testing::CrashStore(*fs_, store_);
  Open();
  int lost = 0;
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kWrites; ++i) lost += !Has(absl::StrCat("k", t, "-", i));
  }
  EXPECT_EQ(lost, 0);
}

// WriteWhenDurable: the committer writes queued batches from its own thread, in order,
// and calls back once they are durable; a WhenDurable that comes after a queued batch
// waits for that batch, even when everything written so far is durable.
TEST_P(RocksStoreTest, AQueuedBatchIsWrittenInOrderAndDurableWhenItsCallbackRuns) {
  // Hold the committer in a callback, so that what is queued meanwhile waits unwritten.
  std::shared_ptr<absl::Notification> release = HoldCommitter("before");
  auto queue = [&](const std::string& key, const std::string& value,
                   std::shared_ptr<absl::Notification> done) {
    rocksdb::WriteBatch batch;
    batch.Put(store_->cf("data"), key, value);
    store_->WriteWhenDurable(std::move(batch), "test", [done](absl::Status s, bool written) {
      EXPECT_TRUE(s.ok()) << s;
      EXPECT_TRUE(written);
      done->Notify();
    });
  };
  auto first = std::make_shared<absl::Notification>();
  auto second = std::make_shared<absl::Notification>();
  queue("k", "first", first);
  queue("k", "second", second);
  EXPECT_FALSE(Has("k")) << "written before the committer took it";
  auto after = std::make_shared<absl::Notification>();
  store_->WhenDurable([after](absl::Status) { after->Notify(); });
  EXPECT_FALSE(after->HasBeenNotified()) << "a wait after a queued batch was answered first";
  release->Notify();
  ASSERT_TRUE(second->WaitForNotificationWithTimeout(absl::Seconds(10)));
  ASSERT_TRUE(after->WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_TRUE(first->HasBeenNotified());
  testing::CrashStore(*fs_, store_);
  Open();
  std::string value;
  ASSERT_TRUE(store_->Get("data", "k", &value).ok()) << "answered before it was durable";
  EXPECT_EQ(value, "second");
}

// WhenDurableLeadingWhenIdle on a quiet store: the caller's own thread syncs, the
// callback runs before the call returns, and the write survives a crash.
TEST_P(RocksStoreTest, OnAQuietStoreTheCallerSyncsOnItsOwnThreadAndTheWriteIsDurable) {
  PutUnsynced("one");
  bool answered = false;
  std::thread::id answered_on;
  store_->WhenDurableLeadingWhenIdle([&](absl::Status durable) {
    EXPECT_TRUE(durable.ok()) << durable;
    answered = true;
    answered_on = std::this_thread::get_id();
  });
  EXPECT_TRUE(answered) << "a quiet store handed the sync to its committer";
  EXPECT_EQ(answered_on, std::this_thread::get_id());
  EXPECT_EQ(store_->led_syncs(), 1u);
  testing::CrashStore(*fs_, store_);
  Open();
  EXPECT_TRUE(Has("one")) << "the callback ran before the write was durable";
}

// While others wait for the committer, a caller does not sync on its own thread; after a
// round that served several callers the store counts as busy, and callers go to the
// committer even on an idle store, until kQuietRounds rounds in a row served one each.
TEST_P(RocksStoreTest, ABusyStoreKeepsTheGroupCommitOnTheCommitter) {
  // Hold the committer in a callback, so that what comes meanwhile waits in its queue.
  std::shared_ptr<absl::Notification> release = HoldCommitter("held");
  PutUnsynced("waiting");
  auto waiting = std::make_shared<absl::Notification>();
  store_->WhenDurable([waiting](absl::Status) { waiting->Notify(); });
  PutUnsynced("busy");
  auto busy = std::make_shared<absl::Notification>();
  store_->WhenDurableLeadingWhenIdle([busy](absl::Status durable) {
    EXPECT_TRUE(durable.ok()) << durable;
    busy->Notify();
  });
  EXPECT_FALSE(busy->HasBeenNotified()) << "synced on the caller's thread behind a queue";
  release->Notify();
  ASSERT_TRUE(busy->WaitForNotificationWithTimeout(absl::Seconds(10)));
  ASSERT_TRUE(waiting->WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(store_->led_syncs(), 0u);
  // That round served two callers: the next ones go to the committer, in rounds of
  // one, until kQuietRounds of them in a row make the store quiet again.
  std::vector<std::string> keys = {"held", "waiting", "busy"};
  for (int i = 0; i < RocksStore::kQuietRounds; ++i) {
    keys.push_back(absl::StrCat("after-busy-", i));
    EXPECT_FALSE(LedOnThisThread(keys.back())) << i;
  }
  keys.push_back("quiet");
  EXPECT_TRUE(LedOnThisThread(keys.back()));
  EXPECT_EQ(store_->led_syncs(), 1u);
  testing::CrashStore(*fs_, store_);
  Open();
  for (const std::string& key : keys) {
    EXPECT_TRUE(Has(key)) << key << ": answered before it was durable";
  }
}

// A caller that syncs on its own thread, and finds that another came to wait meanwhile,
// leaves the store busy: the callers after it go to the committer.
TEST_P(RocksStoreTest, OthersComingDuringACallersOwnSyncMakeTheStoreBusy) {
  auto came = std::make_shared<absl::Notification>();
  bool hooked = false;  // the first log sync from here on: the leader's
  fs_->set_before_wal_sync([&, came] {
    if (std::exchange(hooked, true)) return;
    store_->WhenDurable([came](absl::Status durable) {
      EXPECT_TRUE(durable.ok()) << durable;
      came->Notify();
    });
  });
  EXPECT_TRUE(LedOnThisThread("leader"));
  fs_->set_before_wal_sync(nullptr);
  EXPECT_TRUE(hooked);
  ASSERT_TRUE(came->WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_FALSE(LedOnThisThread("next")) << "a store that others waited on stayed quiet";
  EXPECT_EQ(store_->led_syncs(), 1u);
}

// A batch the store refuses is answered at once as not written, and nothing of it lands.
TEST_P(RocksStoreTest, AQueuedBatchOfAFailedStoreIsAnsweredAsNotWritten) {
  store_->MarkFailed();
  rocksdb::WriteBatch batch;
  batch.Put(store_->cf("data"), "k", "v");
  bool answered = false;
  store_->WriteWhenDurable(std::move(batch), "test", [&](absl::Status s, bool written) {
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
    EXPECT_FALSE(written);
    answered = true;
  });
  EXPECT_TRUE(answered);
  EXPECT_FALSE(Has("k"));
}

INSTANTIATE_TEST_SUITE_P(Logs, RocksStoreTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "BufferedUntilSync" : "WrittenEachWrite";
                         });

// The free-space reserve: the first write looks at the file system, a refused write
// writes nothing, and every write after a refusal looks again (the budget between looks
// is only ever earned by a look that found room).
TEST(RocksStoreSpaceTest, AWriteBelowTheReserveIsRefusedEveryTimeAndNothingIsWritten) {
  StoreOptions options;
  options.min_free_bytes = uint64_t{1} << 62;  // more than any disk has
  auto store = RocksStore::Open(testing::FreshDir("full"), {ColumnFamilySpec{"data", {}}}, options);
  ASSERT_TRUE(store.ok()) << store.status();
  for (int i = 0; i < 3; ++i) {
    rocksdb::WriteBatch batch;
    batch.Put((*store)->cf("data"), absl::StrCat("k", i), "v");
    absl::Status written = (*store)->Write(&batch, /*sync=*/false, "test");
    EXPECT_EQ(written.code(), absl::StatusCode::kResourceExhausted) << written;
    std::string value;
    EXPECT_TRUE((*store)->db()->Get(rocksdb::ReadOptions(), (*store)->cf("data"),
                                    absl::StrCat("k", i), &value).IsNotFound());
  }
  EXPECT_FALSE((*store)->failed()) << "a full disk refuses writes; it does not break the store";
  EXPECT_EQ((*store)->space_looks(), 3u) << "below the reserve, every write looks";
}

TEST(RocksStoreSpaceTest, WritesWithRoomGoThrough) {
  StoreOptions options;
  options.min_free_bytes = 1;
  auto store = RocksStore::Open(testing::FreshDir("room"), {ColumnFamilySpec{"data", {}}}, options);
  ASSERT_TRUE(store.ok()) << store.status();
  for (int i = 0; i < 100; ++i) {
    rocksdb::WriteBatch batch;
    batch.Put((*store)->cf("data"), absl::StrCat("k", i), std::string(1000, 'v'));
    ASSERT_TRUE((*store)->Write(&batch, /*sync=*/false, "test").ok());
  }
}

// Far above the reserve, a look at the file system serves the writes that follow it for
// a moment; below it (the test above), every write looks.
TEST(RocksStoreSpaceTest, FarAboveTheReserveOneLookServesManyWrites) {
  StoreOptions options;
  options.min_free_bytes = 1;
  const std::string dir = testing::FreshDir("roomy");
  struct statvfs fs;
  ASSERT_EQ(statvfs(dir.c_str(), &fs), 0);
  if (static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize < 2 * RocksStore::kSpaceLookMargin) {
    GTEST_SKIP() << "the test directory's file system has too little free space";
  }
  auto store = RocksStore::Open(dir, {ColumnFamilySpec{"data", {}}}, options);
  ASSERT_TRUE(store.ok()) << store.status();
  constexpr int kWrites = 2000;
  for (int i = 0; i < kWrites; ++i) {
    rocksdb::WriteBatch batch;
    batch.Put((*store)->cf("data"), absl::StrCat("k", i), "v");
    ASSERT_TRUE((*store)->Write(&batch, /*sync=*/false, "test").ok());
  }
  // 2000 unsynced writes take a few milliseconds; even on a slow machine far fewer looks
  // than writes (one per millisecond at most).
  EXPECT_GE((*store)->space_looks(), 1u);
  EXPECT_LT((*store)->space_looks(), kWrites / 2u);
}

// Warming the block cache: a store reopened with data only on disk holds none of it in
// its cache; WarmCache reads it in, up to the bound, and stops when asked to.
class RocksStoreWarmTest : public ::testing::Test {
 protected:
  static constexpr int kKeys = 20'000;
  static constexpr size_t kValueBytes = 200;  // about 4 MiB in all, uncompressed

  void SetUp() override {
    Reopen();
    for (int i = 0; i < kKeys; ++i) {
      rocksdb::WriteBatch batch;
      batch.Put(store_->cf("data"), absl::StrCat("k", i), std::string(kValueBytes, 'a' + i % 26));
      ASSERT_TRUE(store_->Write(&batch, /*sync=*/false, "test").ok());
    }
    ASSERT_TRUE(store_->FlushAndCompact("data").ok());
    Reopen();
  }

  void Reopen() {
    store_.reset();
    StoreOptions options;
    options.block_cache_bytes = 64 << 20;
    auto store = RocksStore::Open(dir_, {ColumnFamilySpec{"data", {}}}, options);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
  }

  const std::string dir_ = testing::FreshDir("warm");
  std::unique_ptr<RocksStore> store_;
};

TEST_F(RocksStoreWarmTest, ReadsTheWholeFamilyIntoTheCacheWhenItFits) {
  const size_t cold = store_->block_cache_usage();
  EXPECT_LT(cold, size_t{256} << 10) << "a reopened store starts with a cold cache";
  auto warmed = store_->WarmCache("data", store_->block_cache_capacity(), [] { return false; });
  ASSERT_TRUE(warmed.ok()) << warmed.status();
  // Every data block of the ~4 MiB family is in memory now.
  EXPECT_GE(*warmed, size_t{kKeys} * kValueBytes);
  EXPECT_EQ(*warmed, store_->block_cache_usage());
}

TEST_F(RocksStoreWarmTest, StopsAtItsBound) {
  constexpr size_t kBound = 1 << 20;
  auto warmed = store_->WarmCache("data", kBound, [] { return false; });
  ASSERT_TRUE(warmed.ok()) << warmed.status();
  EXPECT_GE(*warmed, kBound);
  // It looks every few hundred keys: at most that many keys' blocks past the bound.
  EXPECT_LT(*warmed, kBound + (size_t{256} << 10));
}

TEST_F(RocksStoreWarmTest, StopsWhenAsked) {
  int asked = 0;
  auto warmed = store_->WarmCache("data", store_->block_cache_capacity(), [&] {
    ++asked;
    return true;
  });
  ASSERT_TRUE(warmed.ok()) << warmed.status();
  EXPECT_EQ(asked, 1);
  EXPECT_LT(*warmed, size_t{256} << 10) << "it stopped after its first few hundred keys";
}

// A family's memtables are shaped by how it is used (ColumnFamilySpec): a bloom filter
// only where lookups miss, and inserts that start where the last one of their tag went
// where keys arrive in order or are rewritten. RocksDB's per-thread counters show both.
class RocksStoreShapeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ColumnFamilySpec missing{"missing", {}};
    ColumnFamilySpec found{"found", {}};
    found.lookups_miss = false;
    ColumnFamilySpec hinted{"hinted", {}};
    hinted.lookups_miss = false;
    hinted.hint_tag_bytes = 1;
    ColumnFamilySpec unsorted{"unsorted", {}};
    unsorted.lookups_miss = false;
    unsorted.unsorted_memtable = true;
    auto store = RocksStore::Open(dir_, {missing, found, hinted, unsorted}, StoreOptions());
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    rocksdb::SetPerfLevel(rocksdb::PerfLevel::kEnableCount);
  }
  void TearDown() override { rocksdb::SetPerfLevel(rocksdb::PerfLevel::kDisable); }

  void Put(const std::string& family, const std::string& key) {
    rocksdb::WriteBatch batch;
    batch.Put(store_->cf(family), key, "v");
    ASSERT_TRUE(store_->Write(&batch, /*sync=*/false, "test").ok());
  }

  // The user-key comparisons of writing `keys` to `family` one write each, per key.
  double ComparisonsPerInsert(const std::string& family, const std::vector<std::string>& keys) {
    rocksdb::get_perf_context()->Reset();
    for (const std::string& key : keys) Put(family, key);
    return static_cast<double>(rocksdb::get_perf_context()->user_key_comparison_count) /
           keys.size();
  }

  // Key `i` behind the one-byte tag `tag`: ascending in `i`.
  static std::string Numbered(char tag, int i) {
    return std::string{tag, static_cast<char>(i >> 8), static_cast<char>(i & 0xff)};
  }

  // Writes `keys` to a hinted family and to one without hints: a search from the top
  // compares keys at every level of the skiplist, a hinted insert only from near where
  // the last one of its tag went, so it makes at least `factor` times fewer comparisons.
  void ExpectHintedInsertsCompareLess(const std::vector<std::string>& keys, double factor) {
    const double hinted = ComparisonsPerInsert("hinted", keys);
    const double searched = ComparisonsPerInsert("found", keys);
    EXPECT_LT(factor * hinted, searched) << "hinted " << hinted << ", searched " << searched;
  }

  std::vector<std::string> ReadAll(const std::string& family) {
    std::vector<std::string> read;
    std::unique_ptr<rocksdb::Iterator> it = store_->NewIterator(family);
    for (it->SeekToFirst(); it->Valid(); it->Next()) read.push_back(it->key().ToString());
    EXPECT_TRUE(it->status().ok()) << it->status().ToString();
    return read;
  }

  const std::string dir_ = testing::FreshDir("shape");
  std::unique_ptr<RocksStore> store_;
};

TEST_F(RocksStoreShapeTest, OnlyAFamilyWhoseLookupsMissHasAMemtableFilter) {
  Put("missing", "here");
  Put("found", "here");
  std::string value;
  for (const char* family : {"missing", "found"}) {
    rocksdb::get_perf_context()->Reset();
    EXPECT_TRUE(store_->Get(family, "absent", &value).IsNotFound());
    const uint64_t filtered = rocksdb::get_perf_context()->bloom_memtable_miss_count;
    EXPECT_EQ(filtered, std::string(family) == "missing" ? 1u : 0u) << family;
  }
  // Both find what they hold.
  EXPECT_TRUE(store_->Get("missing", "here", &value).ok());
  EXPECT_TRUE(store_->Get("found", "here", &value).ok());
}

TEST_F(RocksStoreShapeTest, KeysInOrderBehindATagStartWhereTheLastWentAndStrayOnesLandRight) {
  constexpr int kKeys = 4000;
  // Two tags interleaved, each ascending: every insert follows the last one of its tag.
  std::vector<std::string> interleaved;
  for (int i = 0; i < kKeys; ++i) {
    interleaved.push_back(Numbered('a', i));
    interleaved.push_back(Numbered('b', i));
  }
  ExpectHintedInsertsCompareLess(interleaved, 3);  // about 20 against 77 here

  // Keys out of order in a hinted family are still placed right.
  std::vector<std::string> shuffled;
  for (int i = 0; i < kKeys; ++i) shuffled.push_back(Numbered('c', i));
  std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937(7));
  for (const std::string& key : shuffled) Put("hinted", key);
  std::vector<std::string> expected = interleaved;
  expected.insert(expected.end(), shuffled.begin(), shuffled.end());
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(ReadAll("hinted"), expected);
}

TEST_F(RocksStoreShapeTest, AKeyRewrittenAgainStartsWhereItsLastVersionWent) {
  // 50 one-byte keys, each rewritten 80 times, round robin: the newest version of a key
  // goes right before its last one, so its search climbs from there only until it passes
  // the key before.
  std::vector<std::string> rewrites;
  for (int round = 0; round < 80; ++round) {
    for (char key = '0'; key < '0' + 50; ++key) rewrites.push_back(std::string(1, key));
  }
  ExpectHintedInsertsCompareLess(rewrites, 1.5);  // about 39 against 75 here
  std::vector<std::string> expected;
  for (char key = '0'; key < '0' + 50; ++key) expected.push_back(std::string(1, key));
  EXPECT_EQ(ReadAll("hinted"), expected);
}

TEST_F(RocksStoreShapeTest, AnUnsortedFamilyAppendsWithoutComparingKeysAndStillReadsInOrder) {
  // Keys in no order, as an audit index's command ids arrive.
  std::vector<std::string> keys;
  for (int i = 0; i < 2000; ++i) keys.push_back(Numbered('k', i));
  std::shuffle(keys.begin(), keys.end(), std::mt19937(11));
  const double appended = ComparisonsPerInsert("unsorted", keys);
  const double searched = ComparisonsPerInsert("found", keys);
  EXPECT_LT(appended, 1) << "an insert searched the memtable";
  EXPECT_GT(searched, 10);

  // Read in key order from the memtable being written, by a scan and by a lookup...
  std::vector<std::string> expected = keys;
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(ReadAll("unsorted"), expected);
  std::string value;
  EXPECT_TRUE(store_->Get("unsorted", keys[17], &value).ok());
  EXPECT_TRUE(store_->Get("unsorted", "absent", &value).IsNotFound());
  // ... and from the files it is flushed to.
  ASSERT_TRUE(store_->FlushAndCompact("unsorted").ok());
  EXPECT_EQ(ReadAll("unsorted"), expected);
  EXPECT_TRUE(store_->Get("unsorted", keys[17], &value).ok());
}

}  // namespace
}  // namespace eonce
