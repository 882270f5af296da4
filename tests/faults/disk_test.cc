// A full disk under the real sidecar and agent: their stores live on a small tmpfs in a
// mount namespace private to this test, which the test then fills. Callers must get
// RESOURCE_EXHAUSTED with nothing written and nothing forwarded, and readiness must turn
// false. When space returns, both become ready again without a restart, the refused
// commands go through once, and a kill -9 afterwards loses nothing acknowledged.
//
// Needs CAP_SYS_ADMIN for the mount namespace; without it the test skips and says why.
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/command/command.h"
#include "common/rpc/tls.h"
#include "eonce/ledger/v1/ledger.grpc.pb.h"
#include "eonce/v1/agent.grpc.pb.h"
#include "eonce/v1/sidecar.grpc.pb.h"
#include "gtest/gtest.h"
#include "outbox_agent/store/states.h"
#include "tests/faults/stack.h"
#include "tests/util/health_check.h"
#include "tests/util/temp_dir.h"

namespace eonce::testing {
namespace {

constexpr size_t kPaddingBytes = 256 * 1024;

// Mounts a tmpfs of `size` at `dir`, visible to this process and its children only.
// Returns why it could not, or "".
std::string PrivateTmpfs(const std::string& dir, const std::string& size) {
  if (unshare(CLONE_NEWNS) != 0) return absl::StrCat("unshare(CLONE_NEWNS): ", strerror(errno));
  if (mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    return absl::StrCat("making / private: ", strerror(errno));
  }
  if (mount("tmpfs", dir.c_str(), "tmpfs", 0, ("size=" + size).c_str()) != 0) {
    return absl::StrCat("mount tmpfs: ", strerror(errno));
  }
  return "";
}

// A valid OpenAccount request, padded with an unknown field of random bytes (which the
// ledger ignores) so that each command fills the disk quickly.
std::string PaddedOpen(const std::string& id) {
  ledger::v1::OpenAccountRequest open;
  open.set_id(id);
  open.set_initial_balance(10);
  std::string bytes = open.SerializeAsString();
  // Field 1000, length-delimited: tag (1000 << 3 | 2) as a varint, then the length.
  bytes += "\xc2\x3e";
  size_t n = kPaddingBytes;
  while (n >= 0x80) {
    bytes.push_back(static_cast<char>((n & 0x7f) | 0x80));
    n >>= 7;
  }
  bytes.push_back(static_cast<char>(n));
  // Incompressible, or the store's compression would make it small again.
  uint64_t x = std::hash<std::string>()(id) | 1;
  for (size_t i = 0; i < kPaddingBytes; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    bytes.push_back(static_cast<char>(x));
  }
  return bytes;
}

v1::Command Open(const std::string& id) {
  v1::Command c;
  c.set_command_id("open-" + id);
  c.set_target_method("/eonce.ledger.v1.Ledger/OpenAccount");
  c.set_request(PaddedOpen(id));
  c.set_actor("teller");
  c.mutable_entity()->set_type("account");
  c.mutable_entity()->set_id(id);
  return c;
}

grpc::Status Submit(v1::Sidecar::Stub& stub, v1::Command c) {
  c.set_idempotency_key(DeriveIdempotencyKey(c));
  FillPayloadHash(&c);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  context.AddMetadata(kTenantHeader, "acme");
  v1::SubmitRequest request;
  *request.mutable_command() = c;
  v1::SubmitResponse response;
  return stub.Submit(&context, request, &response);
}

grpc::Status Enqueue(v1::Agent::Stub& stub, const v1::Command& c) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::EnqueueRequest request;
  *request.mutable_command() = c;
  v1::EnqueueResponse response;
  return stub.Enqueue(&context, request, &response);
}

int WaitForHealth(const std::string& address, int want) {
  int got = -1;
  for (int i = 0; i < 100 && got != want; ++i) {
    got = HealthStatus(NewChannel(address, TlsFiles(), 4 << 20));
    if (got != want) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return got;
}

v1::OutboxRecord WaitFinal(v1::Agent::Stub& agent, const std::string& command_id) {
  v1::OutboxRecord record;
  for (int i = 0; i < 300; ++i) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::GetRequest request;
    request.set_command_id(command_id);
    if (agent.Get(&context, request, &record).ok() && IsFinal(record.state())) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return record;
}

TEST(DiskTest, AFullDiskRefusesWritesAndRecoversWhenSpaceReturns) {
  std::string dir = FreshDir("disk");
  std::string disk = dir + "/disk";
  ASSERT_EQ(mkdir(disk.c_str(), 0755), 0);
  if (std::string why = PrivateTmpfs(disk, "64m"); !why.empty()) {
    GTEST_SKIP() << "a private tmpfs is not available here (" << why
                 << "); run as root to test a full disk";
  }
  StackOptions options;
  options.store_root = disk;
  options.sidecar_args = {"--min_free_mb=16"};
  options.agent_args = {"--min_free_mb=16"};
  auto stack = FaultStack::Start(dir, options);
  ASSERT_TRUE(stack.ok()) << stack.status();
  FaultStack& s = **stack;
  const std::string sidecar_address = s.process(Component::kSidecar).address();
  const std::string agent_address = s.process(Component::kAgent).address();
  auto sidecar = v1::Sidecar::NewStub(NewChannel(sidecar_address, TlsFiles(), 8 << 20));
  auto agent = v1::Agent::NewStub(NewChannel(agent_address, TlsFiles(), 8 << 20));

  std::vector<std::string> acked;
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(Submit(*sidecar, Open(absl::StrCat("s", i))).ok());
    acked.push_back(absl::StrCat("s", i));
  }
  ASSERT_TRUE(Enqueue(*agent, Open("a0")).ok());
  EXPECT_EQ(WaitFinal(*agent, "open-a0").state(), v1::ACKED);

  // Fill the disk to the last byte with a file the test gives back later.
  std::string ballast = disk + "/ballast";
  {
    int fd = open(ballast.c_str(), O_WRONLY | O_CREAT, 0644);
    ASSERT_GE(fd, 0);
    std::string block(64 * 1024, 'b');
    for (int i = 0; i < 2048 && write(fd, block.data(), block.size()) > 0; ++i) {
    }
    close(fd);
  }

  // Refused, with nothing written and nothing forwarded; readiness false.
  grpc::Status refused = Submit(*sidecar, Open("full"));
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << refused.error_message();
  grpc::Status agent_refused = Enqueue(*agent, Open("a1"));
  EXPECT_EQ(agent_refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << agent_refused.error_message();
  EXPECT_EQ(WaitForHealth(sidecar_address, 2), 2);
  EXPECT_EQ(WaitForHealth(agent_address, 2), 2);
  std::map<std::string, int> effects = EffectsByCommand(s.process(Component::kLedger).address())
                                           .value_or(std::map<std::string, int>());
  EXPECT_EQ(effects["open-full"], 0);
  {
    grpc::ClientContext context;
    v1::GetRequest request;
    request.set_command_id("open-a1");
    v1::OutboxRecord record;
    EXPECT_EQ(agent->Get(&context, request, &record).error_code(), grpc::StatusCode::NOT_FOUND);
  }
  std::printf("disk run: full disk refused: sidecar \"%s\", agent \"%s\"\n",
              refused.error_message().c_str(), agent_refused.error_message().c_str());

  // Space returns: both become ready again by themselves, and the refused commands go
  // through, once.
  ASSERT_EQ(unlink(ballast.c_str()), 0);
  EXPECT_EQ(WaitForHealth(sidecar_address, 1), 1);
  EXPECT_EQ(WaitForHealth(agent_address, 1), 1);
  EXPECT_TRUE(s.process(Component::kSidecar).Running());
  EXPECT_TRUE(s.process(Component::kAgent).Running());
  grpc::Status retried = Submit(*sidecar, Open("full"));
  EXPECT_TRUE(retried.ok()) << retried.error_message();
  grpc::Status requeued = Enqueue(*agent, Open("a1"));
  EXPECT_TRUE(requeued.ok()) << requeued.error_message();
  EXPECT_EQ(WaitFinal(*agent, "open-a1").state(), v1::ACKED);

  // And a kill -9 afterwards loses nothing that was acknowledged.
  ASSERT_TRUE(s.KillAndRestart(Component::kSidecar).ok());
  sidecar = v1::Sidecar::NewStub(NewChannel(sidecar_address, TlsFiles(), 8 << 20));
  acked.push_back("full");
  for (const std::string& id : acked) {
    grpc::ClientContext context;
    context.AddMetadata(kTenantHeader, "acme");
    v1::ReconcileRequest request;
    request.set_command_id("open-" + id);
    v1::ReconcileResponse response;
    ASSERT_TRUE(sidecar->Reconcile(&context, request, &response).ok());
    EXPECT_EQ(response.state(), v1::RECORD_COMMITTED) << id;
  }
  effects = EffectsByCommand(s.process(Component::kLedger).address())
                .value_or(std::map<std::string, int>());
  for (const std::string& id : acked) EXPECT_EQ(effects["open-" + id], 1) << id;
  EXPECT_EQ(effects["open-a0"], 1);
  EXPECT_EQ(effects["open-a1"], 1);
}

}  // namespace
}  // namespace eonce::testing
