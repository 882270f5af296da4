#include "common/store/crash_fs.h"

#include "common/store/rocks.h"
#include "gtest/gtest.h"
#include "tests/util/temp_dir.h"

namespace eonce {
namespace {

class CrashFsTest : public ::testing::Test {
 protected:
  void Open() {
    StoreOptions options;
    options.env = fs_->env();
    auto store = RocksStore::Open(dir_, {ColumnFamilySpec{"data", {}}}, options);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
  }

  absl::Status Put(const std::string& key, bool sync) {
    rocksdb::WriteOptions options;
    options.sync = sync;
    return FromRocksForTest(store_->db()->Put(options, store_->cf("data"), key, "v"));
  }

  static absl::Status FromRocksForTest(const rocksdb::Status& s) {
    return s.ok() ? absl::OkStatus() : absl::InternalError(s.ToString());
  }

  bool Has(const std::string& key) {
    std::string value;
    return store_->db()->Get(rocksdb::ReadOptions(), store_->cf("data"), key, &value).ok();
  }

  void CrashAndReopen() {
    fs_->Crash();
    store_->CloseWithoutFlush();
    store_.reset();
    fs_->Recover();
    Open();
  }

  std::string dir_ = testing::FreshDir("crashfs");
  std::shared_ptr<CrashFileSystem> fs_ = NewCrashFileSystem();
  std::unique_ptr<RocksStore> store_;
};

TEST_F(CrashFsTest, UnsyncedWritesAreLostAndSyncedOnesSurvive) {
  Open();
  ASSERT_TRUE(Put("synced", true).ok());
  ASSERT_TRUE(Put("unsynced", false).ok());
  CrashAndReopen();
  EXPECT_TRUE(Has("synced"));
  EXPECT_FALSE(Has("unsynced"));
}

TEST_F(CrashFsTest, ASyncMakesEarlierUnsyncedWritesDurableToo) {
  Open();
  ASSERT_TRUE(Put("first", false).ok());
  ASSERT_TRUE(Put("second", true).ok());  // the WAL is synced up to here
  ASSERT_TRUE(Put("third", false).ok());
  CrashAndReopen();
  EXPECT_TRUE(Has("first"));
  EXPECT_TRUE(Has("second"));
  EXPECT_FALSE(Has("third"));
}

TEST_F(CrashFsTest, NothingTheDeadProcessDoesReachesTheDisk) {
  Open();
  ASSERT_TRUE(Put("before", true).ok());
  fs_->Crash();
  ASSERT_TRUE(Put("after", true).ok());  // the dying process still thinks it wrote
  store_->CloseWithoutFlush();
  store_.reset();
  fs_->Recover();
  Open();
  EXPECT_TRUE(Has("before"));
  EXPECT_FALSE(Has("after"));
  // Repeated crashes keep working.
  ASSERT_TRUE(Put("again", true).ok());
  CrashAndReopen();
  EXPECT_TRUE(Has("again"));
}

TEST_F(CrashFsTest, InjectedSyncFailureFailsTheWrite) {
  Open();
  fs_->set_fail_syncs(true);
  EXPECT_FALSE(Put("k", true).ok());
  fs_->set_fail_syncs(false);
}

}  // namespace
}  // namespace eonce
