#include "common/rpc/grpc_status.h"

#include "common/base/status.h"
#include "google/rpc/error_details.pb.h"
#include "google/rpc/status.pb.h"
#include "gtest/gtest.h"

namespace eonce {
namespace {

// What a standard decoder in any language finds in the details.
struct Decoded {
  google::rpc::Status status;
  google::rpc::ErrorInfo info;
  bool has_info = false;
  google::rpc::RetryInfo retry;
  bool has_retry = false;
};

Decoded Decode(const grpc::Status& status) {
  Decoded out;
  EXPECT_TRUE(out.status.ParseFromString(status.error_details()));
  for (const auto& any : out.status.details()) {
    if (any.UnpackTo(&out.info) && any.type_url() == "type.googleapis.com/google.rpc.ErrorInfo") {
      out.has_info = true;
    }
    if (any.type_url() == "type.googleapis.com/google.rpc.RetryInfo" && any.UnpackTo(&out.retry)) {
      out.has_retry = true;
    }
  }
  return out;
}

TEST(GrpcStatusTest, ErrorsTravelAsAStandardGoogleRpcStatus) {
  absl::Status busy = WithErrorMetadata(
      WithRetryAfter(Error(absl::StatusCode::kResourceExhausted, "TENANT_OVERLOADED", "busy"),
                     250),
      "tenant", "acme");
  grpc::Status wire = ToGrpcStatus(busy, nullptr);
  EXPECT_EQ(wire.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  Decoded d = Decode(wire);
  EXPECT_EQ(d.status.code(), static_cast<int>(grpc::StatusCode::RESOURCE_EXHAUSTED));
  EXPECT_EQ(d.status.message(), "busy");
  ASSERT_TRUE(d.has_info);
  EXPECT_EQ(d.info.reason(), "TENANT_OVERLOADED");
  EXPECT_EQ(d.info.domain(), "eonce.io");
  EXPECT_EQ(d.info.metadata().at("tenant"), "acme");
  ASSERT_TRUE(d.has_retry);
  EXPECT_EQ(d.retry.retry_delay().seconds(), 0);
  EXPECT_EQ(d.retry.retry_delay().nanos(), 250'000'000);

  // And back, with no trailers at all.
  absl::Status back = FromGrpcStatus(wire, nullptr);
  EXPECT_EQ(back.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ReasonOf(back), "TENANT_OVERLOADED");
  EXPECT_EQ(RetryAfterOf(back), 250);
  EXPECT_EQ(ErrorMetadataOf(back).at("tenant"), "acme");
}

TEST(GrpcStatusTest, EveryRetryableAnswerCarriesRetryInfoAndEveryErrorAReason) {
  Decoded unavailable = Decode(ToGrpcStatus(absl::UnavailableError("down"), nullptr));
  ASSERT_TRUE(unavailable.has_retry);
  EXPECT_EQ(unavailable.retry.retry_delay().nanos(), kDefaultRetryAfterMs * 1'000'000);
  EXPECT_EQ(unavailable.info.reason(), "UNAVAILABLE");  // no reason of its own: the code
  Decoded invalid = Decode(ToGrpcStatus(
      Error(absl::StatusCode::kInvalidArgument, "INVALID_FIELD", "command_id: required"),
      nullptr));
  EXPECT_FALSE(invalid.has_retry);  // not retryable: no hint
  EXPECT_EQ(invalid.info.reason(), "INVALID_FIELD");
}

TEST(GrpcStatusTest, ARejectionIsPackedAndOlderBareOnesStillRead) {
  v1::Rejection rejection;
  rejection.set_reason("INSUFFICIENT_FUNDS");
  rejection.set_detail("balance 10 < 11");
  std::string details =
      RejectionStatusDetails(absl::StatusCode::kFailedPrecondition, "no", rejection);
  auto packed = RejectionOf(details);
  ASSERT_TRUE(packed.has_value());
  EXPECT_EQ(packed->detail(), "balance 10 < 11");
  EXPECT_EQ(ReasonOf(FromGrpcStatus(
                grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "no", details), nullptr)),
            "INSUFFICIENT_FUNDS");
  // Records stored by older versions hold the bare message.
  auto bare = RejectionOf(rejection.SerializeAsString());
  ASSERT_TRUE(bare.has_value());
  EXPECT_EQ(bare->reason(), "INSUFFICIENT_FUNDS");
  EXPECT_FALSE(RejectionOf(StatusDetails(absl::UnavailableError("down"))).has_value());
  EXPECT_FALSE(RejectionOf("").has_value());
}

TEST(GrpcStatusTest, OnlyAMessageLimitIsPastMessageLimit) {
  // As gRPC ends a call whose request or answer is too large, on either side.
  EXPECT_TRUE(PastMessageLimit(FromGrpcStatus(
      grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                   "Received message larger than max (4194310 vs. 2097152)"),
      nullptr)));
  EXPECT_TRUE(PastMessageLimit(FromGrpcStatus(
      grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                   "Sent message larger than max (4096202 vs. 716800)"),
      nullptr)));
  // eonce's own refusals carry a reason, whatever their message says.
  EXPECT_FALSE(PastMessageLimit(FromGrpcStatus(
      ToGrpcStatus(Error(absl::StatusCode::kResourceExhausted, "OVERLOADED",
                         "a request larger than max is not the point here"),
                   nullptr),
      nullptr)));
  // A batch's answer the sidecar kept from going past its limit.
  EXPECT_TRUE(PastMessageLimit(FromGrpcStatus(
      ToGrpcStatus(Error(absl::StatusCode::kResourceExhausted, "MESSAGE_TOO_LARGE", "answer"),
                   nullptr),
      nullptr)));
  EXPECT_FALSE(PastMessageLimit(absl::ResourceExhaustedError("memory quota")));
  EXPECT_FALSE(PastMessageLimit(absl::UnavailableError("larger than max")));
}

TEST(GrpcStatusTest, ARefusalBeforeAnyHandlerCarriesItsReasonInItsMessage) {
  // What a business port's caller gate sends: a code and a message, no details.
  absl::Status unauthenticated = FromGrpcStatus(
      grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "NO_IDENTITY: the call states no caller"),
      nullptr);
  EXPECT_EQ(ReasonOf(unauthenticated), "NO_IDENTITY");
  EXPECT_EQ(unauthenticated.message(), "NO_IDENTITY: the call states no caller");
  EXPECT_EQ(ReasonOf(FromGrpcStatus(grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                                                 "BUSINESS_CALLER_NOT_ALLOWED: a workload"),
                                    nullptr)),
            "BUSINESS_CALLER_NOT_ALLOWED");
  // Only those two codes, only an upper-case word first, and details always win.
  EXPECT_EQ(ReasonOf(FromGrpcStatus(
                grpc::Status(grpc::StatusCode::UNAVAILABLE, "GOAWAY: received"), nullptr)),
            "");
  EXPECT_EQ(ReasonOf(FromGrpcStatus(grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                                                 "tls_cert: cannot read /x"),
                                    nullptr)),
            "");
  EXPECT_EQ(ReasonOf(FromGrpcStatus(grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                                                 "Not allowed: no"),
                                    nullptr)),
            "");
  EXPECT_EQ(ReasonOf(FromGrpcStatus(
                ToGrpcStatus(Error(absl::StatusCode::kPermissionDenied, "TENANT_MISMATCH",
                                   "OTHER_REASON: in the message"),
                             nullptr),
                nullptr)),
            "TENANT_MISMATCH");
}

}  // namespace
}  // namespace eonce
