// The sidecar with the ledger in its own process (services/inbox/inbox_upstream.h): the
// real SidecarServer over loopback gRPC, the real LedgerCore on real RocksDB, and no
// second hop. The same promises as two processes: concurrent duplicates apply once, a
// rejection is replayed, a reused key is refused, and a sidecar that lost its records
// applies nothing twice because the inbox answers in its place. The negative control
// runs the same steps over a legacy ledger, which keeps no inbox, and sees the second
// effect.
#include <signal.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/clock.h"
#include "common/base/status.h"
#include "dedupe_sidecar/doors/sidecar_service.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "services/inbox/inbox_upstream.h"
#include "services/ledger/ledger_in_process.h"
#include "tests/integration/ledger_calls.h"
#include "tests/util/process.h"
#include "tests/util/temp_dir.h"

namespace eonce {
namespace {

class InProcessTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    auto families = LedgerCore::ColumnFamilies();
    for (auto& f : Inbox::ColumnFamilies(RealClock::Get())) families.push_back(f);
    auto store = RocksStore::Open(testing::FreshDir("ledger"), families,
                                  Inbox::StoreOptionsFor());
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    inbox_ = std::make_unique<Inbox>(*store_, RealClock::Get(), /*legacy_mode=*/GetParam());
    core_ = std::make_unique<LedgerCore>(*store_, *inbox_);
    upstream_ =
        std::make_unique<InboxUpstream>(*inbox_, LedgerHandlers(*core_), RealClock::Get());
    sidecar_dir_ = testing::FreshDir("sidecar");
    StartSidecar();
    for (const char* id : {"a", "b"}) {
      auto opened = Submit(testing::OpenAccountCommand(id, 1000));
      ASSERT_TRUE(opened.ok()) << opened.status();
    }
  }

  void TearDown() override {
    if (sidecar_ != nullptr) {
      EXPECT_TRUE(sidecar_->Shutdown(1000).ok());
    }
  }

  void StartSidecar() {
    SidecarServerOptions options = testing::SidecarOptionsFor(0, sidecar_dir_);
    options.upstream = upstream_.get();
    auto sidecar = SidecarServer::Start(options, RealClock::Get());
    ASSERT_TRUE(sidecar.ok()) << sidecar.status();
    sidecar_ = std::move(*sidecar);
    stub_ = v1::Sidecar::NewStub(grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(sidecar_->port()), grpc::InsecureChannelCredentials()));
  }

  // The sidecar restarts with none of its records, as if a power cut took them back.
  void ForgetTheSidecar() {
    ASSERT_TRUE(sidecar_->Shutdown(1000).ok());
    sidecar_.reset();
    std::filesystem::remove_all(sidecar_dir_);
    sidecar_dir_ = testing::FreshDir("sidecar");
    StartSidecar();
  }

  absl::StatusOr<v1::SubmitResponse> Submit(const v1::Command& c) {
    return testing::SubmitTo(*stub_, c);
  }

  int EffectsOf(const std::string& command_id) {
    auto page = inbox_->ListEffects(0, 10000);
    if (!page.ok()) return -1;
    int n = 0;
    for (const auto& e : page->effects()) n += e.command_id() == command_id;
    return n;
  }

  int64_t Balance(const std::string& id) {
    auto account = core_->GetAccount("acme", id);
    return account.ok() ? account->balance() : -1;
  }

  std::unique_ptr<RocksStore> store_;
  std::unique_ptr<Inbox> inbox_;
  std::unique_ptr<LedgerCore> core_;
  std::unique_ptr<InboxUpstream> upstream_;
  std::string sidecar_dir_;
  std::unique_ptr<SidecarServer> sidecar_;
  std::unique_ptr<v1::Sidecar::Stub> stub_;
};

TEST_P(InProcessTest, SixtyFourConcurrentDuplicatesApplyOnce) {
  const v1::Command t1 = testing::TransferCommand("t1", 10);
  std::vector<std::thread> threads;
  std::atomic<int> answered{0};
  std::vector<std::string> responses(64);
  for (int i = 0; i < 64; ++i) {
    threads.emplace_back([&, i] {
      // IN_PROGRESS while the first runs: retried, as a caller would.
      for (int attempt = 0; attempt < 200; ++attempt) {
        auto r = Submit(t1);
        if (r.ok()) {
          responses[i] = r->result().response();
          answered++;
          return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(answered.load(), 64);
  for (const std::string& r : responses) EXPECT_EQ(r, responses[0]);
  EXPECT_EQ(EffectsOf("t1"), 1);
  EXPECT_EQ(Balance("a"), 990);
  EXPECT_EQ(Balance("b"), 1010);
}

// The embedded path (InboxUpstream, no gRPC hop to the business) carries the command's
// trace to its effect, as the sidecar's binary does over gRPC.
TEST_P(InProcessTest, ACommandsTraceReachesItsEffect) {
  v1::Command traced = testing::TransferCommand("traced", 1);
  traced.mutable_trace()->set_traceparent(
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  auto answer = Submit(traced);
  ASSERT_TRUE(answer.ok()) << answer.status();
  auto page = inbox_->ListEffects(0, 10000);
  ASSERT_TRUE(page.ok()) << page.status();
  int found = 0;
  for (const auto& e : page->effects()) {
    if (e.command_id() != "traced") continue;
    ++found;
    EXPECT_EQ(e.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
    EXPECT_EQ(e.span_id(), "00f067aa0ba902b7");
  }
  EXPECT_EQ(found, 1);
}

TEST_P(InProcessTest, ARejectionIsReplayedAndAnUnknownMethodIsRefusedBeforeAnyWrite) {
  auto too_much = Submit(testing::TransferCommand("big", 5000));
  ASSERT_TRUE(too_much.ok()) << too_much.status();
  EXPECT_EQ(too_much->result().code(), static_cast<int>(absl::StatusCode::kFailedPrecondition));
  auto again = Submit(testing::TransferCommand("big", 5000));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->disposition(), v1::REPLAYED);
  EXPECT_EQ(again->result().SerializeAsString(), too_much->result().SerializeAsString());

  auto unknown = Submit(testing::LedgerCommand("x1", "/eonce.ledger.v1.Ledger/Mint", ""));
  EXPECT_FALSE(unknown.ok());
  EXPECT_EQ(EffectsOf("x1"), 0);
}

TEST_P(InProcessTest, ASidecarThatForgotItsRecordsAppliesNothingTwice) {
  const bool legacy = GetParam();
  const v1::Command t1 = testing::TransferCommand("t1", 100, "key-1");
  auto first = Submit(t1);
  ASSERT_TRUE(first.ok()) << first.status();
  ForgetTheSidecar();
  auto again = Submit(t1);
  ASSERT_TRUE(again.ok()) << again.status();
  if (legacy) {
    // The negative control: nothing in the business remembers t1, so the retry after
    // the sidecar's loss is a second effect, and this test sees it.
    EXPECT_EQ(EffectsOf("t1"), 2);
    EXPECT_EQ(Balance("a"), 800);
    return;
  }
  EXPECT_EQ(again->result().response(), first->result().response());
  EXPECT_EQ(EffectsOf("t1"), 1);
  EXPECT_EQ(Balance("a"), 900);
  // The key is still t1's, with its payload: the inbox refuses the rest.
  ForgetTheSidecar();
  auto reused = Submit(testing::TransferCommand("t2", 100, "key-1"));
  EXPECT_EQ(ReasonOf(reused.status()), "KEY_REUSED") << reused.status();
  EXPECT_EQ(EffectsOf("t2"), 0);
}

// The binary: ledger_service --sidecar_listen runs the sidecar in its process; callers reach
// the sidecar's port (the one it announces). Killed with SIGKILL and started again on the
// same data, it answers the retry of an applied command from what it kept, and the
// ledger, started alone on that data afterwards, holds one effect of it.
// SubmitBatch: each command of a batch is taken as Submit takes it. 20 transfers, each
// twice in one batch: every command applies once, each answer is its own command's (its
// effect's sequence number), a second occurrence in flight is IN_PROGRESS and nothing
// else, and the batch sent again is replayed item by item.
TEST_P(InProcessTest, ABatchAppliesEachCommandOnceAndAnswersEachInItsPlace) {
  std::vector<v1::Command> batch;
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < 20; ++i) batch.push_back(testing::TransferCommand(absl::StrCat("t", i), i + 1));
  }
  auto first = testing::SubmitBatchTo(*stub_, batch);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(first->size(), batch.size());
  auto page = inbox_->ListEffects(0, 10000);
  ASSERT_TRUE(page.ok()) << page.status();
  std::map<std::string, uint64_t> seq_of;
  for (const v1::Effect& e : page->effects()) seq_of[e.command_id()] = e.seq();
  for (size_t i = 0; i < batch.size(); ++i) {
    const std::string& id = batch[i].command_id();
    EXPECT_EQ(EffectsOf(id), 1) << id;
    const absl::StatusOr<v1::SubmitResponse>& answer = (*first)[i];
    if (!answer.ok()) {
      EXPECT_EQ(ReasonOf(answer.status()), "IN_PROGRESS") << i << " " << answer.status();
      continue;
    }
    ledger::v1::TransferResponse transfer;
    ASSERT_TRUE(transfer.ParseFromString(answer->result().response())) << i;
    EXPECT_EQ(transfer.effect_seq(), seq_of[id]) << "item " << i << " answers another command";
  }
  EXPECT_EQ(Balance("a"), 1000 - 210);
  EXPECT_EQ(Balance("b"), 1000 + 210);

  auto again = testing::SubmitBatchTo(*stub_, batch);
  ASSERT_TRUE(again.ok()) << again.status();
  for (size_t i = 0; i < batch.size(); ++i) {
    ASSERT_TRUE((*again)[i].ok()) << i << " " << (*again)[i].status();
    EXPECT_EQ((*again)[i]->disposition(), v1::REPLAYED) << i;
    if ((*first)[i].ok()) {
      EXPECT_EQ((*again)[i]->result().response(), (*first)[i]->result().response()) << i;
    }
  }
  EXPECT_EQ(Balance("a"), 1000 - 210);
}

// Where a first-seen command's wait for the ledger's disk runs. A one-command Submit's
// forward syncs a quiet store on the Submit's own thread, as a unary mutation over gRPC
// does; a batch's items leave their waits to the committer, which syncs once for them
// all. In legacy mode the forward follows the sidecar's own synced record, from that
// store's committer: it never syncs the ledger on its thread. The store counts the syncs
// that ran on a caller's thread. (The sidecar learns from a method's first answer that
// the business keeps its inbox; until then it syncs its own record first.)
TEST_P(InProcessTest, AOneCommandSubmitSyncsAQuietLedgerOnItsThreadAndABatchDoesNot) {
  auto learned = Submit(testing::TransferCommand("first", 1));
  ASSERT_TRUE(learned.ok()) << learned.status();
  const uint64_t before = store_->led_syncs();
  constexpr int kSubmits = 12;
  for (int i = 0; i < kSubmits; ++i) {
    auto answer = Submit(testing::TransferCommand(absl::StrCat("alone-", i), 1));
    ASSERT_TRUE(answer.ok()) << answer.status();
  }
  EXPECT_EQ(store_->led_syncs() - before, GetParam() ? 0u : uint64_t{kSubmits});

  std::vector<v1::Command> batch;
  for (int i = 0; i < 20; ++i) batch.push_back(testing::TransferCommand(absl::StrCat("b", i), 1));
  auto answers = testing::SubmitBatchTo(*stub_, batch);
  ASSERT_TRUE(answers.ok()) << answers.status();
  for (const auto& answer : *answers) ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(store_->led_syncs() - before, GetParam() ? 0u : uint64_t{kSubmits})
      << "a batch's items synced on the batch's thread, one after another";
  EXPECT_EQ(Balance("a"), 1000 - 1 - kSubmits - 20);
}

TEST_P(InProcessTest, ABatchRefusesOnlyItsBadCommandsAndNeverMoreThanItsLimit) {
  v1::Command no_id = testing::TransferCommand("ignored", 1);
  no_id.clear_command_id();
  std::vector<v1::Command> batch = {
      testing::TransferCommand("good1", 1), no_id,
      testing::LedgerCommand("x1", "/eonce.ledger.v1.Ledger/Mint", ""),
      testing::TransferCommand("good2", 2)};
  auto answers = testing::SubmitBatchTo(*stub_, batch);
  ASSERT_TRUE(answers.ok()) << answers.status();
  ASSERT_EQ(answers->size(), 4u);
  EXPECT_TRUE((*answers)[0].ok()) << (*answers)[0].status();
  EXPECT_EQ((*answers)[1].status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReasonOf((*answers)[1].status()), "INVALID_FIELD");
  EXPECT_EQ((*answers)[2].status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE((*answers)[3].ok()) << (*answers)[3].status();
  EXPECT_EQ(EffectsOf("good1"), 1);
  EXPECT_EQ(EffectsOf("good2"), 1);
  EXPECT_EQ(EffectsOf("x1"), 0);
  EXPECT_EQ(Balance("a"), 997);

  std::vector<v1::Command> too_many;
  for (int i = 0; i <= kMaxBatchCommands; ++i) {
    too_many.push_back(testing::TransferCommand(absl::StrCat("many", i), 1));
  }
  auto refused = testing::SubmitBatchTo(*stub_, too_many);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReasonOf(refused.status()), "BATCH_TOO_LARGE");
  EXPECT_EQ(EffectsOf("many0"), 0);
  auto empty = testing::SubmitBatchTo(*stub_, {});
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Balance("a"), 997);
}

TEST(EmbeddedSidecarBinaryTest, AnsweredOnceAcrossAKill) {
  const std::string dir = testing::FreshDir("embedded");
  // The business's own door is a unix socket (plaintext TCP is refused with the sidecar
  // in process); TEST_TMPDIR is too long a path for one.
  const std::vector<std::string> args = {
      "--listen=unix:" + testing::SocketDir() + "/business.sock", "--data_dir=" + dir + "/ledger",
      "--sidecar_listen=127.0.0.1:0", "--sidecar_data_dir=" + dir + "/sidecar"};
  auto start = [&] {
    return Process::Start("services/ledger/ledger_service", args, dir + "/ledger.log");
  };
  auto first = start();
  ASSERT_TRUE(first.ok()) << first.status();
  auto stub = [](const std::string& address) {
    return v1::Sidecar::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  };
  auto sidecar = stub((*first)->address());
  for (const char* id : {"a", "b"}) {
    ASSERT_TRUE(testing::SubmitTo(*sidecar, testing::OpenAccountCommand(id, 1000)).ok());
  }
  const v1::Command t1 = testing::TransferCommand("t1", 100);
  auto applied = testing::SubmitTo(*sidecar, t1);
  ASSERT_TRUE(applied.ok()) << applied.status();
  auto duplicate = testing::SubmitTo(*sidecar, t1);
  ASSERT_TRUE(duplicate.ok());
  EXPECT_EQ(duplicate->disposition(), v1::REPLAYED);

  (*first)->Signal(SIGKILL, true);
  auto second = start();
  ASSERT_TRUE(second.ok()) << second.status();
  sidecar = stub((*second)->address());
  auto retried = testing::SubmitTo(*sidecar, t1);
  ASSERT_TRUE(retried.ok()) << retried.status();
  EXPECT_EQ(retried->result().response(), applied->result().response());
  EXPECT_EQ((*second)->Signal(SIGTERM, true), 0);

  // The ledger alone on the same data: its own port, its effect ledger.
  auto alone = Process::Start("services/ledger/ledger_service",
                              {"--listen=127.0.0.1:0", "--data_dir=" + dir + "/ledger"},
                              dir + "/alone.log");
  ASSERT_TRUE(alone.ok()) << alone.status();
  auto channel = grpc::CreateChannel((*alone)->address(), grpc::InsecureChannelCredentials());
  auto effects = v1::Effects::NewStub(channel);
  auto ledger = ledger::v1::Ledger::NewStub(channel);
  EXPECT_EQ(testing::EffectsOf(*effects, "t1"), 1);
  EXPECT_EQ(testing::BalanceOf(*ledger, "a"), 900);
}

INSTANTIATE_TEST_SUITE_P(Modes, InProcessTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "NegativeControlLegacyLedger" : "Inbox";
                         });

}  // namespace
}  // namespace eonce
