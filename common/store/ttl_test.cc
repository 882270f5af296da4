#include "common/store/ttl.h"

#include <cstdlib>
#include <string>

#include "common/store/rocks.h"
#include "eonce/v1/command.pb.h"
#include "gtest/gtest.h"

namespace eonce {
namespace {

class TombstoneTrimmer : public Trimmer {
 public:
  bool Trim(absl::string_view payload, std::string* trimmed) override {
    *trimmed = "tomb:" + std::string(payload.substr(0, 3));
    return true;
  }
};

std::string TempDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  return std::string(base != nullptr ? base : "/tmp") + "/" + name;
}

TEST(FramedTest, RoundTrips) {
  std::string value = EncodeFramed(123, 45, "payload");
  Framed framed;
  ASSERT_TRUE(DecodeFramed(value, &framed));
  EXPECT_EQ(framed.drop_at_ms, 123);
  EXPECT_EQ(framed.trim_at_ms, 45);
  EXPECT_EQ(framed.payload, "payload");
  EXPECT_TRUE(framed.DroppedAt(123));
  EXPECT_FALSE(framed.DroppedAt(122));
  EXPECT_FALSE(DecodeFramed("short", &framed));
  Framed never;
  ASSERT_TRUE(DecodeFramed(EncodeFramed(0, 0, ""), &never));
  EXPECT_FALSE(never.DroppedAt(INT64_MAX));
  EXPECT_FALSE(never.TrimmedAt(INT64_MAX));
}

TEST(FramedTest, ParsesAFramedMessageOrSaysItCannot) {
  v1::CallResult result;
  result.set_code(5);
  result.set_response("bytes");
  v1::CallResult parsed;
  Framed framed;
  ASSERT_TRUE(ParseFramed(EncodeFramed(7, 0, result.SerializeAsString()), &parsed, &framed));
  EXPECT_EQ(parsed.SerializeAsString(), result.SerializeAsString());
  EXPECT_EQ(framed.drop_at_ms, 7);
  EXPECT_FALSE(ParseFramed("short", &parsed));                              // no frame
  EXPECT_FALSE(ParseFramed(EncodeFramed(0, 0, "\xff\xff\xff"), &parsed));  // no message
}

class TtlFilterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ColumnFamilySpec spec{"data", {}};
    spec.options.compaction_filter_factory =
        std::make_shared<TtlCompactionFilterFactory>(clock_, &trimmer_, stats_);
    path_ = TempDir(::testing::UnitTest::GetInstance()->current_test_info()->name());
    rocksdb::Options destroy;
    rocksdb::DestroyDB(path_, destroy).PermitUncheckedError();
    auto store = RocksStore::Open(path_, {spec}, StoreOptions());
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
  }

  std::string Get(const std::string& key) {
    std::string value;
    auto status = store_->db()->Get(rocksdb::ReadOptions(), store_->cf("data"), key, &value);
    return status.ok() ? value : "<missing>";
  }

  void Compact() {
    ASSERT_TRUE(store_->db()->Flush(rocksdb::FlushOptions(), store_->cf("data")).ok());
    rocksdb::CompactRangeOptions options;
    options.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForce;
    ASSERT_TRUE(store_->db()->CompactRange(options, store_->cf("data"), nullptr, nullptr).ok());
  }

  ManualClock clock_{1'000'000};
  TombstoneTrimmer trimmer_;
  TtlStats stats_;
  std::string path_;
  std::unique_ptr<RocksStore> store_;
};

TEST_F(TtlFilterTest, KeepsLiveValuesAcrossManyCompactions) {
  auto* db = store_->db();
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), store_->cf("data"), "k" + std::to_string(i),
                        EncodeFramed(clock_.NowMs() + 10'000, clock_.NowMs() + 5'000, "body"))
                    .ok());
  }
  for (int round = 0; round < 10; ++round) {
    clock_.AdvanceMs(400);  // still before trim and drop
    Compact();
    for (int i = 0; i < 200; ++i) {
      Framed framed;
      std::string value = Get("k" + std::to_string(i));
      ASSERT_TRUE(DecodeFramed(value, &framed)) << "lost k" << i << " in round " << round;
      EXPECT_EQ(framed.payload, "body");
    }
  }
  EXPECT_EQ(stats_.dropped.load(), 0);
  EXPECT_EQ(stats_.trimmed.load(), 0);
}

TEST_F(TtlFilterTest, TrimsThenDrops) {
  auto* db = store_->db();
  int64_t now = clock_.NowMs();
  ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), store_->cf("data"), "a",
                      EncodeFramed(now + 10'000, now + 5'000, "abcdef"))
                  .ok());
  ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), store_->cf("data"), "forever",
                      EncodeFramed(0, 0, "keep"))
                  .ok());
  clock_.AdvanceMs(5'000);
  Compact();
  Framed framed;
  std::string value = Get("a");
  ASSERT_TRUE(DecodeFramed(value, &framed));
  EXPECT_EQ(framed.payload, "tomb:abc");  // the tombstone outlives the body
  EXPECT_EQ(framed.trim_at_ms, 0);
  EXPECT_EQ(stats_.trimmed.load(), 1);

  clock_.AdvanceMs(5'000);
  Compact();
  EXPECT_EQ(Get("a"), "<missing>");
  EXPECT_EQ(stats_.dropped.load(), 1);
  value = Get("forever");
  ASSERT_TRUE(DecodeFramed(value, &framed));
  EXPECT_EQ(framed.payload, "keep");
}

TEST(RocksStoreTest, SecondOpenOfSameDirectoryFailsFast) {
  std::string path = TempDir("locked");
  auto first = RocksStore::Open(path, {}, StoreOptions());
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = RocksStore::Open(path, {}, StoreOptions());
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(second.status().message().find("in use by another process"), std::string::npos);
}

}  // namespace
}  // namespace eonce
