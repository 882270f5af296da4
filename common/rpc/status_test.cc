#include "common/base/status.h"

#include "common/rpc/grpc_status.h"
#include "gtest/gtest.h"

namespace eonce {
namespace {

TEST(StatusTest, ReasonAndRetryAfterRoundTrip) {
  absl::Status s = WithRetryAfter(
      Error(absl::StatusCode::kUnavailable, "IN_PROGRESS", "still running"), 250);
  EXPECT_EQ(ReasonOf(s), "IN_PROGRESS");
  ASSERT_TRUE(RetryAfterOf(s).has_value());
  EXPECT_EQ(*RetryAfterOf(s), 250);
  EXPECT_EQ(ReasonOf(absl::InternalError("x")), "");
  EXPECT_FALSE(RetryAfterOf(absl::InternalError("x")).has_value());
}

TEST(StatusTest, ReturnIfErrorAndAssignOrReturn) {
  auto fails = []() -> absl::StatusOr<int> { return absl::NotFoundError("gone"); };
  auto works = []() -> absl::StatusOr<int> { return 7; };
  auto use = [&](bool fail) -> absl::StatusOr<int> {
    EONCE_ASSIGN_OR_RETURN(int value, fail ? fails() : works());
    EONCE_RETURN_IF_ERROR(value == 7 ? absl::OkStatus() : absl::InternalError("bad"));
    return value + 1;
  };
  EXPECT_EQ(*use(false), 8);
  EXPECT_EQ(use(true).status().code(), absl::StatusCode::kNotFound);
}

TEST(StatusTest, RocksStatusMapsToSpecificCodes) {
  EXPECT_TRUE(FromRocks(rocksdb::Status::OK(), "put").ok());
  EXPECT_EQ(FromRocks(rocksdb::Status::NoSpace("disk"), "put").code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(FromRocks(rocksdb::Status::IOError("eio"), "put").code(),
            absl::StatusCode::kUnavailable);
  absl::Status misuse = FromRocks(rocksdb::Status::InvalidArgument("no such family"), "put");
  EXPECT_EQ(misuse.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(ReasonOf(misuse), "STORE_ERROR");
  EXPECT_EQ(FromRocks(rocksdb::Status::Corruption("bad"), "get").code(),
            absl::StatusCode::kDataLoss);
  EXPECT_NE(FromRocks(rocksdb::Status::IOError("eio"), "put").message().find("put"),
            absl::string_view::npos);
}

TEST(GrpcStatusTest, CodeMessageAndReasonCrossTheBoundary) {
  grpc::Status wire = ToGrpcStatus(
      Error(absl::StatusCode::kAlreadyExists, "IDEMPOTENCY_CONFLICT", "other payload"),
      nullptr);
  EXPECT_EQ(wire.error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_EQ(wire.error_message(), "other payload");
  absl::Status back = FromGrpcStatus(wire, nullptr);
  EXPECT_EQ(back.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus(), nullptr).ok());
}

}  // namespace
}  // namespace eonce
