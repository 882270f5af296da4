// The sidecar's catalog of its business's methods (MethodCatalog, through GrpcUpstream) in
// front of real gRPC servers: a business that is not serving yet, and one whose answers
// to the catalog's calls are held. The Deduper over it keeps its records in a real RocksDB
// (the Deduper's test fixture), on a manual clock.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/rpc/server.h"
#include "common/base/status.h"
#include "dedupe_sidecar/core/deduper_test_fixture.h"
#include "dedupe_sidecar/upstream/grpc_upstream.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"
#include "services/ledger/ledger_service.h"
#include "tests/integration/ledger_calls.h"
#include "tests/util/temp_dir.h"

namespace eonce {
namespace {

// A business starting up: its server is up, with reflection and health checking, before
// its own services are registered, and it says it is not serving yet.
std::unique_ptr<grpc::Server> StartingBusiness(const std::string& address) {
  EnableStandardServices();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(address, grpc::InsecureServerCredentials());
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server != nullptr) server->GetHealthCheckService()->SetServingStatus(false);
  return server;
}

// A business that holds every call it gets (the catalog's health and reflection calls)
// unanswered until the test releases them, or their caller gives up.
class StallingBusiness : public grpc::CallbackGenericService {
 public:
  StallingBusiness() {
    // Not gRPC's own health service: the health call, too, comes to this one.
    grpc::EnableDefaultHealthCheckService(false);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterCallbackGenericService(this);
    server_ = builder.BuildAndStart();
  }
  ~StallingBusiness() override {
    ReleaseAll();
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  }

  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

  grpc::ServerGenericBidiReactor* CreateReactor(
      grpc::GenericCallbackServerContext* /*context*/) override {
    return new Held(this);
  }

  // Waits (at most `limit`) until `count` calls are held; whether they are.
  bool WaitForHeld(int count, absl::Duration limit) {
    absl::MutexLock lock(&mu_);
    auto enough = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return held_count_ >= count; };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), limit);
  }
  int held() {
    absl::MutexLock lock(&mu_);
    return held_count_;
  }
  int ended() {
    absl::MutexLock lock(&mu_);
    return ended_;
  }
  void ReleaseAll() {
    std::vector<Held*> release;
    {
      absl::MutexLock lock(&mu_);
      for (Held* held : held_) {
        if (!held->finished.exchange(true)) release.push_back(held);
      }
    }
    // None of these can be done (and gone) before its Finish below.
    for (Held* held : release) {
      held->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "released"));
    }
  }

 private:
  class Held : public grpc::ServerGenericBidiReactor {
   public:
    explicit Held(StallingBusiness* business) : business_(business) { StartRead(&request_); }
    void OnReadDone(bool ok) override {
      if (!ok) {
        if (!finished.exchange(true)) Finish(grpc::Status::CANCELLED);
        return;
      }
      absl::MutexLock lock(&business_->mu_);
      business_->held_.push_back(this);
      ++business_->held_count_;
    }
    void OnCancel() override {
      if (!finished.exchange(true)) Finish(grpc::Status::CANCELLED);
    }
    void OnDone() override {
      {
        absl::MutexLock lock(&business_->mu_);
        business_->held_.erase(std::remove(business_->held_.begin(), business_->held_.end(), this),
                               business_->held_.end());
        ++business_->ended_;
      }
      delete this;
    }
    std::atomic<bool> finished{false};

   private:
    StallingBusiness* business_;
    grpc::ByteBuffer request_;
  };

  absl::Mutex mu_;
  std::vector<Held*> held_ ABSL_GUARDED_BY(mu_);
  int held_count_ ABSL_GUARDED_BY(mu_) = 0;  // calls held, ever
  int ended_ ABSL_GUARDED_BY(mu_) = 0;       // calls that ended
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

class MethodCatalogTest : public DeduperTest {
 protected:
  ~MethodCatalogTest() override {
    grpc_deduper_.reset();
    grpc_upstream_.reset();
  }

  // A Deduper on the fixture's store and clock whose business is the gRPC server at
  // `address`; each call of a catalog read may take `catalog_timeout_ms`.
  void Connect(const std::string& address, int64_t catalog_timeout_ms) {
    grpc_upstream_ = std::make_unique<GrpcUpstream>(address, TlsFiles(), clock_, 4 << 20,
                                                    /*batch_calls=*/0, catalog_timeout_ms);
    grpc_deduper_ =
        std::make_unique<Deduper>(*store_, *audit_, *grpc_upstream_, *policy_, clock_, options_);
  }

  // Submits through that Deduper and waits for the answer (a forward answers on one of
  // gRPC's threads, within the forward's timeout).
  absl::StatusOr<v1::SubmitResponse> SubmitThrough(const v1::Command& command) {
    Caller caller;
    caller.tenant = "acme";
    caller.workload = "agent";
    absl::StatusOr<v1::SubmitResponse> answer = absl::InternalError("no answer");
    absl::Notification answered;
    grpc_deduper_->Submit(caller, command, [&](absl::StatusOr<v1::SubmitResponse> r) {
      answer = std::move(r);
      answered.Notify();
    });
    answered.WaitForNotification();
    return answer;
  }

  std::unique_ptr<GrpcUpstream> grpc_upstream_;
  std::unique_ptr<Deduper> grpc_deduper_;
};

// A business that answers reflection before its services are registered, and is not
// serving yet, lists none of its methods: a command for one of them must not look wrong
// for good (the agent would reject it and free the entity's lane). It is retryable until
// the catalog has been read from the serving business, and then applied.
TEST_F(MethodCatalogTest, AMethodOfABusinessNotYetServingIsRetryableUntilItServes) {
  const std::string socket = "unix:" + testing::SocketDir() + "/business.sock";
  std::unique_ptr<grpc::Server> starting = StartingBusiness(socket);
  ASSERT_NE(starting, nullptr);
  Connect(socket, /*catalog_timeout_ms=*/10'000);
  ASSERT_TRUE(grpc_upstream_->AwaitCatalog(absl::Seconds(20)));  // its first read

  v1::Command open = testing::OpenAccountCommand("a", 100);
  absl::StatusOr<v1::SubmitResponse> early = SubmitThrough(open);
  EXPECT_EQ(early.status().code(), absl::StatusCode::kUnavailable) << early.status();
  EXPECT_EQ(ReasonOf(early.status()), "CATALOG_PENDING") << early.status();
  EXPECT_TRUE(RetryAfterOf(early.status()).has_value());
  EXPECT_EQ(StateOf(open.idempotency_key()), v1::RECORD_NOT_SEEN);

  // The business is up, serving, on the same socket.
  starting->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  starting.reset();
  LedgerServerOptions ledger_options;
  ledger_options.data_dir = testing::FreshDir("ledger");
  ledger_options.listen_address = socket;
  auto ledger = LedgerServer::Start(ledger_options, RealClock::Get());
  ASSERT_TRUE(ledger.ok()) << ledger.status();

  // The next command asks for the catalog again (once the rate limit allows), and comes
  // back once it is read.
  clock_.AdvanceMs(MethodCatalog::kMinRefreshIntervalMs);
  EXPECT_EQ(ReasonOf(SubmitThrough(open).status()), "CATALOG_PENDING");
  ASSERT_TRUE(grpc_upstream_->AwaitCatalog(absl::Seconds(20)));
  absl::StatusOr<v1::SubmitResponse> applied = SubmitThrough(open);
  ASSERT_TRUE(applied.ok()) << applied.status();
  EXPECT_EQ(applied->disposition(), v1::APPLIED);
  EXPECT_EQ(applied->result().code(), 0);

  // From the serving business's catalog, a method it lacks is refused for good.
  v1::Command typo = testing::LedgerCommand("typo", "/eonce.ledger.v1.Ledger/OpenAcount",
                                            open.request(), "", "b");
  EXPECT_EQ(ReasonOf(SubmitThrough(typo).status()), "UNKNOWN_METHOD");
  ASSERT_TRUE((*ledger)->Shutdown(1000).ok());
}

// The catalog is read on a thread of its own: a Submit for a method it does not list is
// answered at once, while the business still holds the read, and asking again starts no
// second read (one at a time).
TEST_F(MethodCatalogTest, ASubmitDoesNotWaitForASlowCatalogRead) {
  StallingBusiness slow;
  Connect(slow.address(), /*catalog_timeout_ms=*/10'000);
  ASSERT_TRUE(slow.WaitForHeld(1, absl::Seconds(20)));  // the first read, held

  for (int i = 0; i < 5; ++i) {
    clock_.AdvanceMs(MethodCatalog::kFreshMs);  // past every rate limit: it would ask again
    absl::StatusOr<v1::SubmitResponse> answer = SubmitThrough(Cmd("c" + std::to_string(i)));
    EXPECT_EQ(answer.status().code(), absl::StatusCode::kUnavailable) << answer.status();
    EXPECT_EQ(ReasonOf(answer.status()), "CATALOG_PENDING") << answer.status();
  }
  // Every answer came while the read was still held, and it is the only one.
  EXPECT_EQ(slow.ended(), 0);
  EXPECT_EQ(slow.held(), 1);
  slow.ReleaseAll();
}

}  // namespace
}  // namespace eonce
