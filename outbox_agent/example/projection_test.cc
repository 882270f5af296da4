#include "outbox_agent/example/projection.h"

#include "eonce/ledger/v1/ledger.pb.h"
#include "gtest/gtest.h"

namespace eonce {
namespace {

v1::OutboxRecord Acked(const std::string& id, int64_t amount) {
  v1::OutboxRecord r;
  r.set_state(v1::ACKED);
  r.mutable_command()->set_command_id(id);
  r.mutable_command()->set_target_method("/eonce.ledger.v1.Ledger/Transfer");
  ledger::v1::TransferRequest t;
  t.set_from("a");
  t.set_to("b");
  t.set_amount(amount);
  r.mutable_command()->set_request(t.SerializeAsString());
  ledger::v1::TransferResponse response;
  response.set_from_balance(100 - amount);
  r.mutable_result()->set_response(response.SerializeAsString());
  return r;
}

TEST(ProjectionTest, ReplayingAnAckChangesNothing) {
  Projection p;
  EXPECT_TRUE(p.Apply(Acked("t1", 10)));
  EXPECT_TRUE(p.Apply(Acked("t2", 5)));
  EXPECT_FALSE(p.Apply(Acked("t1", 10)));  // replayed ack
  EXPECT_FALSE(p.Apply(Acked("t1", 10)));
  EXPECT_EQ(p.transfers(), 2);
  EXPECT_EQ(p.amount_moved(), 15);
  EXPECT_EQ(p.applied().at("t1").from_balance_after, 90);
}

TEST(ProjectionTest, OnlyAckedSuccessesCount) {
  Projection p;
  v1::OutboxRecord sending = Acked("t1", 10);
  sending.set_state(v1::SENDING);
  EXPECT_FALSE(p.Apply(sending));
  v1::OutboxRecord rejected = Acked("t2", 10);
  rejected.set_state(v1::REJECTED);
  EXPECT_FALSE(p.Apply(rejected));
  v1::OutboxRecord business_error = Acked("t3", 10);
  business_error.mutable_result()->set_code(9);
  EXPECT_FALSE(p.Apply(business_error));
  EXPECT_EQ(p.transfers(), 0);
  EXPECT_EQ(p.amount_moved(), 0);
}

}  // namespace
}  // namespace eonce
