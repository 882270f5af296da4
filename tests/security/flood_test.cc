// A flood from one tenant while another's commands still complete. The sidecar is the
// real server (gRPC on loopback, RocksDB in a test folder); its business is a stand-in
// that holds every call of tenant "flood" until the test lets them go, so that the flood
// really stays in flight.
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/base/clock.h"
#include "common/command/command.h"
#include "common/rpc/grpc_status.h"
#include "common/base/status.h"
#include "dedupe_sidecar/doors/sidecar_service.h"
#include "eonce/v1/sidecar.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "tests/util/temp_dir.h"

namespace eonce {
namespace {

class HoldingBusiness : public Upstream {
 public:
  void Forward(ForwardCall call, std::function<void(ForwardReply)> done) override {
    ForwardReply reply;
    reply.kind = ForwardReply::Kind::kAnswered;
    reply.result.set_response("applied:" + call.command_id);
    if (call.tenant == "flood") {
      absl::MutexLock lock(&mu_);
      held_.push_back([done, reply] { done(reply); });
      return;
    }
    done(reply);
  }
  void QueryOutcome(const std::string&, const std::string&, int64_t,
                    std::function<void(absl::StatusOr<v1::QueryOutcomeResponse>)> done) override {
    done(v1::QueryOutcomeResponse());
  }
  bool Reachable() override { return true; }

  size_t held() {
    absl::MutexLock lock(&mu_);
    return held_.size();
  }
  // Waits (bounded) until at least `count` calls are held; returns how many are.
  size_t WaitForHeld(size_t count, absl::Duration limit) {
    absl::MutexLock lock(&mu_);
    auto enough = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return held_.size() >= count; };
    mu_.AwaitWithTimeout(absl::Condition(&enough), limit);
    return held_.size();
  }
  void ReleaseAll() {
    std::deque<std::function<void()>> release;
    {
      absl::MutexLock lock(&mu_);
      release.swap(held_);
    }
    for (auto& answer : release) answer();
  }

 private:
  absl::Mutex mu_;
  std::deque<std::function<void()>> held_ ABSL_GUARDED_BY(mu_);
};

v1::Command Command(const std::string& id) {
  v1::Command c;
  c.set_command_id(id);
  c.set_target_method("/eonce.ledger.v1.Ledger/Transfer");
  c.set_request("transfer " + id);
  c.mutable_entity()->set_type("account");
  c.mutable_entity()->set_id(id);
  c.set_idempotency_key(DeriveIdempotencyKey(c));
  FillPayloadHash(&c);
  return c;
}

// A sidecar in front of `business` on loopback, at most 64 calls in flight and
// `per_tenant` of one tenant.
absl::StatusOr<std::unique_ptr<SidecarServer>> StartSidecar(HoldingBusiness& business,
                                                           int per_tenant) {
  SidecarServerOptions options;
  options.data_dir = testing::FreshDir("sidecar");
  options.upstream = &business;
  options.max_in_flight = 64;
  options.max_in_flight_per_tenant = per_tenant;
  return SidecarServer::Start(options, RealClock::Get());
}

TEST(FloodTest, OneTenantsFloodIsCappedWhileAnotherTenantsCommandsComplete) {
  constexpr int kPerTenant = 8;
  constexpr int kFlood = 40;
  HoldingBusiness business;
  auto sidecar = StartSidecar(business, kPerTenant);
  ASSERT_TRUE(sidecar.ok()) << sidecar.status();
  auto stub = v1::Sidecar::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string((*sidecar)->port()), grpc::InsecureChannelCredentials()));

  // The flood: 40 first-seen commands at once, each held by the business once admitted.
  struct Call {
    grpc::ClientContext context;
    v1::SubmitRequest request;
    v1::SubmitResponse response;
    grpc::Status status;
    absl::Notification done;
  };
  std::vector<std::unique_ptr<Call>> flood;
  absl::Mutex answered_mu;
  int answered = 0;
  for (int i = 0; i < kFlood; ++i) {
    auto call = std::make_unique<Call>();
    call->context.AddMetadata(kTenantHeader, "flood");
    call->context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    *call->request.mutable_command() = Command(absl::StrCat("flood-", i));
    Call* raw = call.get();
    stub->async()->Submit(&raw->context, &raw->request, &raw->response,
                          [raw, &answered_mu, &answered](grpc::Status s) {
                            raw->status = std::move(s);
                            raw->done.Notify();
                            absl::MutexLock lock(&answered_mu);
                            ++answered;
                          });
    flood.push_back(std::move(call));
  }
  // The refused ones answer at once; the admitted ones wait in the business.
  std::vector<std::string> refused_ids;
  int refused = 0;
  {
    absl::MutexLock lock(&answered_mu);
    auto all_refused = [&]() ABSL_SHARED_LOCKS_REQUIRED(answered_mu) {
      return answered >= kFlood - kPerTenant;
    };
    answered_mu.AwaitWithTimeout(absl::Condition(&all_refused), absl::Seconds(20));
    refused = answered;
  }
  ASSERT_EQ(refused, kFlood - kPerTenant);
  for (auto& call : flood) {
    if (!call->done.HasBeenNotified()) continue;
    absl::Status status = FromGrpcStatus(call->status, &call->context);
    EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
    EXPECT_EQ(ReasonOf(status), "TENANT_OVERLOADED");
    EXPECT_TRUE(RetryAfterOf(status).has_value());
    refused_ids.push_back(call->request.command().command_id());
  }
  // The admitted ones reach the business once their intent is written.
  EXPECT_EQ(business.WaitForHeld(kPerTenant, absl::Seconds(20)),
            static_cast<size_t>(kPerTenant));

  // Meanwhile another tenant's commands go through, one after another.
  for (int i = 0; i < 20; ++i) {
    grpc::ClientContext context;
    context.AddMetadata(kTenantHeader, "acme");
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::SubmitRequest request;
    *request.mutable_command() = Command(absl::StrCat("acme-", i));
    v1::SubmitResponse response;
    grpc::Status status = stub->Submit(&context, request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(response.result().response(), absl::StrCat("applied:acme-", i));
  }

  // Once the business answers, the flood's places come back.
  business.ReleaseAll();
  for (auto& call : flood) call->done.WaitForNotification();

  // A refused command left nothing behind.
  for (const std::string& id : refused_ids) {
    grpc::ClientContext context;
    context.AddMetadata(kTenantHeader, "flood");
    v1::ReconcileRequest reconcile;
    reconcile.set_command_id(id);
    v1::ReconcileResponse state;
    ASSERT_TRUE(stub->Reconcile(&context, reconcile, &state).ok());
    EXPECT_EQ(state.state(), v1::RECORD_NOT_SEEN) << id;
  }
  grpc::ClientContext context;
  context.AddMetadata(kTenantHeader, "flood");
  v1::SubmitRequest again;
  *again.mutable_command() = Command(refused_ids.front());
  v1::SubmitResponse response;
  std::thread release([&] {
    // Its forward is held like the others; let it go as soon as it arrives.
    business.WaitForHeld(1, absl::Seconds(2));
    business.ReleaseAll();
  });
  grpc::Status status = stub->Submit(&context, again, &response);
  release.join();
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.result().response(), "applied:" + refused_ids.front());
  ASSERT_TRUE((*sidecar)->Shutdown(1000).ok());
}

// A lookup takes a place as a Submit does: with the tenant's places all held by commands
// in flight it is refused before it reads anything, and another tenant's still answers.
TEST(FloodTest, ReconcileIsAdmittedLikeSubmit) {
  constexpr int kPerTenant = 2;
  HoldingBusiness business;
  auto sidecar = StartSidecar(business, kPerTenant);
  ASSERT_TRUE(sidecar.ok()) << sidecar.status();
  auto stub = v1::Sidecar::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string((*sidecar)->port()), grpc::InsecureChannelCredentials()));
  auto reconcile = [&](const std::string& tenant, const std::string& id) {
    grpc::ClientContext context;
    context.AddMetadata(kTenantHeader, tenant);
    v1::ReconcileRequest request;
    request.set_command_id(id);
    v1::ReconcileResponse state;
    grpc::Status status = stub->Reconcile(&context, request, &state);
    return status.ok() ? absl::OkStatus() : FromGrpcStatus(status, &context);
  };

  // The tenant's places, held by its commands in the business.
  struct Call {
    grpc::ClientContext context;
    v1::SubmitRequest request;
    v1::SubmitResponse response;
    absl::Notification done;
  };
  std::vector<std::unique_ptr<Call>> held;
  for (int i = 0; i < kPerTenant; ++i) {
    auto call = std::make_unique<Call>();
    call->context.AddMetadata(kTenantHeader, "flood");
    *call->request.mutable_command() = Command(absl::StrCat("held-", i));
    Call* raw = call.get();
    stub->async()->Submit(&raw->context, &raw->request, &raw->response,
                          [raw](grpc::Status) { raw->done.Notify(); });
    held.push_back(std::move(call));
  }
  ASSERT_EQ(business.WaitForHeld(kPerTenant, absl::Seconds(20)),
            static_cast<size_t>(kPerTenant));

  absl::Status refused = reconcile("flood", "held-0");
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  EXPECT_EQ(ReasonOf(refused), "TENANT_OVERLOADED");
  EXPECT_TRUE(RetryAfterOf(refused).has_value());
  EXPECT_TRUE(reconcile("acme", "held-0").ok());  // another tenant's lookups go on

  business.ReleaseAll();
  for (auto& call : held) call->done.WaitForNotification();
  EXPECT_TRUE(reconcile("flood", "held-0").ok());
  ASSERT_TRUE((*sidecar)->Shutdown(1000).ok());
}

}  // namespace
}  // namespace eonce
