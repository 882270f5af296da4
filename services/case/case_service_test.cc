// The case service over real gRPC: the inbox and exact outcomes after a crash.
#include "services/case/case_service.h"

#include "common/base/clock.h"
#include "common/command/command.h"
#include "eonce/v1/outcome.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "tests/util/temp_dir.h"

namespace eonce {
namespace {

class CrashAfterApply : public FaultInjector {
 public:
  absl::Status Hit(FaultPoint point) override {
    if (armed && point == FaultPoint::kAfterApplyBeforeResponse) {
      return absl::UnavailableError("crashed after apply");
    }
    return absl::OkStatus();
  }
  bool armed = false;
};

class CaseServiceTest : public ::testing::Test {
 protected:
  void Start() {
    host_.reset();
    ServiceHostOptions options;
    options.data_dir = dir_;
    options.faults = &faults_;
    auto host = ServiceHost::Start(options, clock_, CaseCore::ColumnFamilies(), CaseSetup());
    ASSERT_TRUE(host.ok()) << host.status();
    host_ = std::move(*host);
    auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(host_->port()),
                                       grpc::InsecureChannelCredentials());
    cases_ = case_mgmt::v1::Cases::NewStub(channel);
    outcome_ = v1::Outcome::NewStub(channel);
  }

  grpc::Status Create(const std::string& command_id, case_mgmt::v1::Case* out,
                      grpc::ClientContext* context) {
    context->AddMetadata(kCommandIdHeader, command_id);
    context->AddMetadata(kTenantHeader, "acme");
    case_mgmt::v1::CreateCaseRequest request;
    request.set_id("k9");
    return cases_->CreateCase(context, request, out);
  }

  std::string dir_ = testing::FreshDir("case_service");
  CrashAfterApply faults_;
  ManualClock clock_;
  std::unique_ptr<ServiceHost> host_;
  std::unique_ptr<case_mgmt::v1::Cases::Stub> cases_;
  std::unique_ptr<v1::Outcome::Stub> outcome_;
};

TEST_F(CaseServiceTest, CrashBetweenEffectAndAnswerIsReportedExactlyAfterRestart) {
  Start();
  faults_.armed = true;
  case_mgmt::v1::Case lost;
  grpc::ClientContext first;
  first.AddMetadata(kComponentHeader, "sidecar");  // as the sidecar does
  EXPECT_EQ(Create("create-k9", &lost, &first).error_code(), grpc::StatusCode::UNAVAILABLE);
  faults_.armed = false;
  Start();  // reopen the database

  grpc::ClientContext query_context;
  query_context.AddMetadata(kComponentHeader, "sidecar");  // as the sidecar does
  query_context.AddMetadata(kTenantHeader, "acme");
  v1::QueryOutcomeRequest query;
  query.set_command_id("create-k9");
  v1::QueryOutcomeResponse outcome;
  ASSERT_TRUE(outcome_->QueryOutcome(&query_context, query, &outcome).ok());
  EXPECT_TRUE(outcome.applied());

  case_mgmt::v1::Case again;
  grpc::ClientContext second;
  second.AddMetadata(kComponentHeader, "sidecar");  // as the sidecar does
  ASSERT_TRUE(Create("create-k9", &again, &second).ok());
  EXPECT_EQ(again.revision(), 1);
  EXPECT_EQ(outcome.result().response(), again.SerializeAsString());
  auto revision = second.GetServerTrailingMetadata().find(kEntityRevisionTrailer);
  ASSERT_NE(revision, second.GetServerTrailingMetadata().end());
  EXPECT_EQ(std::string(revision->second.data(), revision->second.size()), "1");

  // A different command creating the same case is a business rejection.
  case_mgmt::v1::Case twice;
  grpc::ClientContext third;
  third.AddMetadata(kComponentHeader, "sidecar");  // as the sidecar does
  EXPECT_EQ(Create("create-k9-again", &twice, &third).error_code(),
            grpc::StatusCode::ALREADY_EXISTS);
}

}  // namespace
}  // namespace eonce
