// The outbox's payloads: a long one kept apart from its record while the record may be
// sent, back in the record once it is final (outbox_layout.h, kInlinePayloadBytes).
#include <memory>
#include <string>
#include <vector>

#include "common/store/ttl.h"
#include "outbox_agent/store/outbox_store_test_fixture.h"
#include "rocksdb/write_batch.h"

namespace eonce {
namespace {

// The payload (the command's request) is kept apart from the record while the record may
// be sent, so a transition rewrites the small state and not the payload.
class OutboxPayloadTest : public OutboxStoreTest {
 protected:
  // The record's bytes as stored, and the payload kept apart (empty when none).
  std::string StoredRecord(const std::string& id) { return Raw("records", id); }
  std::string StoredPayload(const std::string& id) { return Raw("payloads", id); }
  std::string Raw(const char* cf, const std::string& id) {
    std::string value;
    rocksdb::Status s = rocks_->Get(cf, id, &value);
    EXPECT_TRUE(s.ok() || s.IsNotFound()) << s.ToString();
    return s.ok() ? value : "";
  }
  const std::string payload_ = std::string(4096, 'p');
};

TEST_F(OutboxPayloadTest, ATransitionRewritesTheStateAndNotThePayload) {
  ASSERT_TRUE(store_->Insert(Cmd("c1", "a", payload_)).ok());
  EXPECT_EQ(StoredPayload("c1"), payload_);
  EXPECT_LT(StoredRecord("c1").size(), 1024u);
  EXPECT_EQ((*store_->Get("c1"))->command().request(), payload_);
  EXPECT_EQ((*store_->GetState("c1"))->command().request(), "");
  // Marks the payload as stored: a transition that wrote it again would write it back.
  ASSERT_TRUE(rocks_->db()->Put({}, rocks_->cf("payloads"), "c1", "as stored").ok());
  auto sent = store_->Mutate("c1", "test", [](OutboxRecord* r) {
    r->set_state(v1::SENDING);
    return absl::OkStatus();
  }, false);
  ASSERT_TRUE(sent.ok()) << sent.status();
  EXPECT_EQ(sent->command().request(), "as stored");  // Mutate's answer has the payload
  EXPECT_EQ(StoredPayload("c1"), "as stored");
  EXPECT_LT(StoredRecord("c1").size(), 1024u);
  // MutateMany gives it only where asked.
  OutboxStore::Change plain = SetState("c1", v1::RETRYABLE_FAILED);
  OutboxStore::Change asking = SetState("c1", v1::SENDING);
  asking.with_payload = true;
  auto moved = store_->MutateMany({plain, asking});
  ASSERT_TRUE(moved[0].ok() && moved[1].ok());
  EXPECT_EQ(moved[0]->command().request(), "");
  EXPECT_EQ(moved[1]->command().request(), "as stored");
  EXPECT_EQ(StoredPayload("c1"), "as stored");
}

TEST_F(OutboxPayloadTest, AFinalRecordCarriesItsPayloadSoRetentionDropsBoth) {
  OutboxStoreOptions options;
  options.forensic_retention_ms = 1000;
  Open(options);
  ASSERT_TRUE(store_->Insert(Cmd("done", "a", payload_)).ok());
  ASSERT_TRUE(store_->Insert(Cmd("dead", "b", payload_)).ok());
  ASSERT_TRUE(Move("done", v1::ACKED).ok());
  ASSERT_TRUE(Move("dead", v1::DEAD_LETTERED).ok());
  EXPECT_EQ(StoredPayload("done"), "");
  EXPECT_GT(StoredRecord("done").size(), payload_.size());
  EXPECT_EQ((*store_->GetState("done"))->command().request(), payload_);
  // A dead letter waits for an operator, who may send it again: still apart.
  EXPECT_EQ(StoredPayload("dead"), payload_);
  clock_.AdvanceMs(1000);
  ASSERT_TRUE(store_->CompactAll().ok());
  EXPECT_FALSE(store_->Get("done")->has_value());
  std::unique_ptr<rocksdb::Iterator> it = rocks_->NewIterator("payloads");
  std::vector<std::string> kept;
  for (it->SeekToFirst(); it->Valid(); it->Next()) kept.push_back(it->key().ToString());
  EXPECT_EQ(kept, std::vector<std::string>{"dead"});
  EXPECT_EQ((*store_->Get("dead"))->command().request(), payload_);
}

TEST_F(OutboxPayloadTest, ARequeuedFinalRecordKeepsItsPayloadApartAgain) {
  ASSERT_TRUE(store_->Insert(Cmd("c1", "a", payload_)).ok());
  ASSERT_TRUE(Move("c1", v1::REJECTED).ok());
  EXPECT_EQ(StoredPayload("c1"), "");
  auto requeued = store_->Mutate("c1", "requeued", [](OutboxRecord* r) {
    r->set_state(v1::QUEUED);
    return absl::OkStatus();
  }, true);
  ASSERT_TRUE(requeued.ok()) << requeued.status();
  EXPECT_EQ(requeued->command().request(), payload_);
  EXPECT_EQ(StoredPayload("c1"), payload_);
  EXPECT_LT(StoredRecord("c1").size(), 1024u);
  Open();  // synced: a crash keeps both
  EXPECT_EQ((*store_->Get("c1"))->command().request(), payload_);
}

TEST_F(OutboxPayloadTest, ARecordOfAnEarlierVersionCarriesItsPayloadUntilItsNextTransition) {
  ASSERT_TRUE(store_->Insert(Cmd("c1", "a", payload_)).ok());
  // As an earlier version stored it: the payload in the record, nothing apart.
  OutboxRecord old = **store_->Get("c1");
  rocksdb::WriteBatch batch;
  batch.Put(rocks_->cf("records"), "c1", EncodeFramed(0, 0, old.SerializeAsString()));
  batch.Delete(rocks_->cf("payloads"), "c1");
  ASSERT_TRUE(rocks_->Write(&batch, /*sync=*/true, "test").ok());
  Open();
  EXPECT_EQ((*store_->Get("c1"))->command().request(), payload_);
  ASSERT_TRUE(Move("c1", v1::SENDING).ok());
  EXPECT_EQ(StoredPayload("c1"), payload_);
  EXPECT_LT(StoredRecord("c1").size(), 1024u);
  EXPECT_EQ((*store_->Get("c1"))->command().request(), payload_);
}

// A short payload costs less to rewrite than a second key: it stays in its record.
TEST_F(OutboxPayloadTest, AShortPayloadStaysInItsRecord) {
  const std::string short_payload(512, 's');
  ASSERT_TRUE(store_->Insert(Cmd("c1", "a", short_payload)).ok());
  ASSERT_TRUE(Move("c1", v1::SENDING).ok());
  EXPECT_EQ(StoredPayload("c1"), "");
  EXPECT_EQ((*store_->GetState("c1"))->command().request(), short_payload);
  ASSERT_TRUE(store_->Insert(Cmd("c2", "b", short_payload + "l")).ok());
  EXPECT_EQ(StoredPayload("c2"), short_payload + "l");
}

TEST_F(OutboxPayloadTest, AnEnqueuedPayloadSurvivesACrash) {
  ASSERT_TRUE(store_->Insert(Cmd("c1", "a", payload_)).ok());
  Open();
  EXPECT_EQ((*store_->Get("c1"))->command().request(), payload_);
  EXPECT_EQ((*store_->List(v1::QUEUED, "", 10))[0].command().request(), payload_);
}

}  // namespace
}  // namespace eonce
