// Memory under a flood: the real dedupe_sidecar binary, flooded by one tenant with
// commands of 1 MiB each, while its business holds every call of that tenant. With the
// sidecar's limits (a per-tenant cap on calls in flight and a gRPC memory quota) the
// sidecar's peak resident memory stays bounded; the negative control lifts the limits
// and the same flood takes several times as much. The figures are printed.
#include <chrono>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/command/command.h"
#include "eonce/ledger/v1/ledger.grpc.pb.h"
#include "eonce/v1/sidecar.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"
#include "tests/util/process.h"
#include "tests/util/temp_dir.h"

namespace eonce {
namespace {

constexpr int kFloodCalls = 160;
constexpr size_t kPayloadBytes = 1'000'000;  // under the 1 MiB request limit

// A business with Ledger.Transfer (so server reflection lists it) that answers at once,
// except the calls of tenant "flood", which it holds until the test lets them go.
class HoldingBusiness {
 public:
  HoldingBusiness() {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&service_);
    builder.SetMaxReceiveMessageSize(8 << 20);
    server_ = builder.BuildAndStart();
  }
  ~HoldingBusiness() {
    ReleaseAll();
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  }
  int port() const { return port_; }
  void ReleaseAll() {
    std::vector<grpc::ServerUnaryReactor*> release;
    {
      absl::MutexLock lock(&mu_);
      release.swap(held_);
    }
    for (auto* reactor : release) reactor->Finish(grpc::Status::OK);
  }

 private:
  class Service
      : public ledger::v1::Ledger::WithRawCallbackMethod_Transfer<ledger::v1::Ledger::Service> {
   public:
    explicit Service(HoldingBusiness* owner) : owner_(owner) {}
    grpc::ServerUnaryReactor* Transfer(grpc::CallbackServerContext* context,
                                       const grpc::ByteBuffer* /*request*/,
                                       grpc::ByteBuffer* response) override {
      grpc::Slice empty("", 0);
      *response = grpc::ByteBuffer(&empty, 1);  // an empty TransferResponse
      grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
      auto tenant = context->client_metadata().find(kTenantHeader);
      if (tenant == context->client_metadata().end() || tenant->second != "flood") {
        reactor->Finish(grpc::Status::OK);
        return reactor;
      }
      absl::MutexLock lock(&owner_->mu_);
      owner_->held_.push_back(reactor);
      return reactor;
    }

   private:
    HoldingBusiness* owner_;
  };

  absl::Mutex mu_;
  std::vector<grpc::ServerUnaryReactor*> held_ ABSL_GUARDED_BY(mu_);
  Service service_{this};
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

// The peak resident memory of a process, from /proc, in MiB.
int64_t PeakRssMiB(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) {
      int64_t kib = 0;
      std::string digits;
      for (char c : line) {
        if (c >= '0' && c <= '9') digits.push_back(c);
      }
      if (absl::SimpleAtoi(digits, &kib)) return kib >> 10;
    }
  }
  return -1;
}

struct FloodResult {
  int64_t peak_rss_mib = -1;
  int refused = 0;
  int answered = 0;
};

// Starts the sidecar with `limits`, floods it, and reports its peak resident memory.
FloodResult Flood(const std::vector<std::string>& limits, const std::string& name) {
  FloodResult out;
  HoldingBusiness business;
  std::string dir = testing::FreshDir(name);
  std::vector<std::string> args = {"--listen=127.0.0.1:0",
                                   "--data_dir=" + dir + "/sidecar",
                                   "--upstream=127.0.0.1:" + std::to_string(business.port()),
                                   "--lease_ms=60000",
                                   "--forward_timeout_ms=30000",
                                   "--outcome_query_timeout_ms=500"};
  args.insert(args.end(), limits.begin(), limits.end());
  auto sidecar = Process::Start("dedupe_sidecar/dedupe_sidecar", args, dir + "/sidecar.log");
  EXPECT_TRUE(sidecar.ok()) << sidecar.status();
  if (!sidecar.ok()) return out;
  grpc::ChannelArguments channel_args;
  channel_args.SetMaxSendMessageSize(8 << 20);
  auto stub = v1::Sidecar::NewStub(grpc::CreateCustomChannel(
      (*sidecar)->address(), grpc::InsecureChannelCredentials(), channel_args));

  struct Call {
    grpc::ClientContext context;
    v1::SubmitRequest request;
    v1::SubmitResponse response;
    grpc::Status status;
  };
  absl::Mutex mu;
  int done = 0;
  std::vector<std::unique_ptr<Call>> calls;
  const std::string payload(kPayloadBytes, 'x');
  for (int i = 0; i < kFloodCalls; ++i) {
    auto call = std::make_unique<Call>();
    call->context.AddMetadata(kTenantHeader, "flood");
    call->context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    v1::Command* c = call->request.mutable_command();
    c->set_command_id(absl::StrCat("flood-", i));
    c->set_target_method("/eonce.ledger.v1.Ledger/Transfer");
    c->set_request(payload);
    c->mutable_entity()->set_type("account");
    c->mutable_entity()->set_id(absl::StrCat("e", i));
    c->set_idempotency_key(DeriveIdempotencyKey(*c));
    FillPayloadHash(c);
    Call* raw = call.get();
    stub->async()->Submit(&raw->context, &raw->request, &raw->response,
                          [raw, &mu, &done](grpc::Status s) {
                            raw->status = std::move(s);
                            absl::MutexLock lock(&mu);
                            ++done;
                          });
    calls.push_back(std::move(call));
  }
  // The refusals come back; the admitted calls stay held by the business. Wait until
  // the answers stop coming (bounded), then read the peak.
  {
    absl::MutexLock lock(&mu);
    int seen = -1;
    for (int round = 0; round < 40 && seen != done; ++round) {
      seen = done;
      auto more = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu) { return done > seen || done == kFloodCalls; };
      mu.AwaitWithTimeout(absl::Condition(&more), absl::Seconds(2));
    }
  }
  out.peak_rss_mib = PeakRssMiB((*sidecar)->pid());
  business.ReleaseAll();
  {
    absl::MutexLock lock(&mu);
    auto all = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu) { return done == kFloodCalls; };
    mu.AwaitWithTimeout(absl::Condition(&all), absl::Seconds(60));
  }
  for (auto& call : calls) {
    out.refused += call->status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED;
    out.answered += call->status.ok();
  }
  return out;
}

TEST(FloodMemoryTest, TheSidecarsLimitsBoundItsMemoryUnderAFlood) {
  FloodResult capped = Flood({"--max_in_flight_per_tenant=8", "--max_in_flight=64",
                              "--memory_quota_mb=32"},
                             "capped");
  FloodResult uncapped = Flood({"--max_in_flight_per_tenant=100000", "--max_in_flight=100000",
                                "--memory_quota_mb=8192"},
                               "uncapped");
  std::printf("flood of %d x 1 MiB: peak RSS %lld MiB with limits (%d refused), "
              "%lld MiB without (%d refused)\n",
              kFloodCalls, static_cast<long long>(capped.peak_rss_mib), capped.refused,
              static_cast<long long>(uncapped.peak_rss_mib), uncapped.refused);
  // Every call ended: refused, or answered once the business let it go.
  EXPECT_EQ(capped.refused + capped.answered, kFloodCalls);
  EXPECT_GE(capped.refused, kFloodCalls - 64);
  EXPECT_EQ(uncapped.refused, 0);
  // The bound, which the flood (160 MiB of payloads, each held twice or more on its way
  // to the store) would break without the limits.
  EXPECT_GT(capped.peak_rss_mib, 0);
  EXPECT_LT(capped.peak_rss_mib, 200);
  // The negative control: without the limits the same flood is held in memory.
  EXPECT_GT(uncapped.peak_rss_mib, 200);
  EXPECT_GT(uncapped.peak_rss_mib, 2 * capped.peak_rss_mib);
}

}  // namespace
}  // namespace eonce
