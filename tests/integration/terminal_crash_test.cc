// Terminal transitions survive an agent crash that loses them. The agent writes ACKED
// unsynced, and REJECTED and CONFLICT unsynced until the sync it makes before anyone is
// told of them: a crash can take ACKED back at any time, and the others until that sync,
// and leave the record SENDING on disk (the claim's sync made SENDING durable). The
// restart turns it UNKNOWN, and reconciling with the sidecar must end in the very state
// it had.
// The agent's store runs on the crash file system, so the lost write is really lost; the
// sidecar is the real Deduper on RocksDB, called in process, in front of a scripted
// business.
#include <memory>
#include <string>

#include "common/base/clock.h"
#include "common/command/command.h"
#include "common/store/crash_fs.h"
#include "common/base/random.h"
#include "common/store/rocks.h"
#include "common/base/status.h"
#include "dedupe_sidecar/core/deduper.h"
#include "dedupe_sidecar/upstream/fake_upstream.h"
#include "gtest/gtest.h"
#include "outbox_agent/core/outbox.h"
#include "outbox_agent/core/replayer.h"
#include "tests/util/crash.h"
#include "tests/util/in_process_sidecar.h"
#include "tests/util/temp_dir.h"

namespace eonce {
namespace {

using testing::InProcessSidecar;

enum class Ending { kAcked, kRejected, kConflict };

class TerminalCrash : public ::testing::Test {
 protected:
  void SetUp() override {
    auto families = RecordStore::ColumnFamilies(sidecar_filters_);
    for (auto& f : AuditLog::ColumnFamilies(sidecar_filters_)) families.push_back(f);
    StoreOptions sidecar_options;
    sidecar_options.inline_durability = true;  // the Deduper answers before Submit returns
    auto rocks = RocksStore::Open(testing::FreshDir("sidecar"), families, sidecar_options);
    ASSERT_TRUE(rocks.ok()) << rocks.status();
    sidecar_rocks_ = std::move(*rocks);
    records_ = std::make_unique<RecordStore>(*sidecar_rocks_, clock_, RetentionOptions());
    ASSERT_TRUE(records_->SettleRetention().ok());
    audit_ = std::make_unique<AuditLog>(*sidecar_rocks_, clock_, 90LL * 24 * 3600 * 1000);
    policy_ = std::move(*PolicyStore::Open(""));
    deduper_ = std::make_unique<Deduper>(*records_, *audit_, upstream_, *policy_, clock_,
                                         DeduperOptions());
    sidecar_ = std::make_unique<InProcessSidecar>(*deduper_);
    StartAgent();
  }

  void TearDown() override {
    StopAgent();
    deduper_.reset();
    audit_.reset();
    records_.reset();
    sidecar_rocks_.reset();
  }

  void StartAgent() {
    StoreOptions options;
    options.env = agent_fs_->env();
    auto rocks = RocksStore::Open(agent_dir_, OutboxStore::ColumnFamilies(agent_filters_), options);
    ASSERT_TRUE(rocks.ok()) << rocks.status();
    agent_rocks_ = std::move(*rocks);
    store_ = std::make_unique<OutboxStore>(*agent_rocks_, clock_, OutboxStoreOptions());
    ASSERT_TRUE(store_->RecoverAfterRestart().ok());
    credential_ = std::move(*CredentialState::Load(*store_, "acme", "agent", 1));
    outbox_ = std::make_unique<Outbox>(*store_, *credential_, clock_, random_, CommandLimits());
    ReplayerOptions replay;
    replayer_ = std::make_unique<Replayer>(*store_, *sidecar_, *credential_, clock_, random_,
                                           replay);
  }

  void StopAgent() {
    replayer_.reset();
    outbox_.reset();
    credential_.reset();
    store_.reset();
    if (agent_rocks_ != nullptr) agent_rocks_->CloseWithoutFlush();
    agent_rocks_.reset();
  }

  // kill -9 and a power cut: whatever the agent did not sync is gone.
  void CrashAgent() {
    replayer_.reset();
    outbox_.reset();
    credential_.reset();
    store_.reset();
    testing::CrashStore(*agent_fs_, agent_rocks_);
    agent_fs_->set_drop_wal_syncs(false);  // the new process's syncs reach the disk
    StartAgent();
  }

  v1::Command Command(const std::string& id, const std::string& key, const std::string& body) {
    v1::Command c;
    c.set_command_id(id);
    c.set_idempotency_key(key);
    c.set_target_method("/eonce.ledger.v1.Ledger/Transfer");
    c.set_request(body);
    c.mutable_entity()->set_type("account");
    c.mutable_entity()->set_id(id);
    return c;
  }

  OutboxRecord Get(const std::string& id) { return **store_->Get(id); }

  int ForwardsOf(const std::string& id) {
    int n = 0;
    for (size_t i = 0; i < upstream_.forwards(); ++i) n += upstream_.call(i).command_id == id;
    return n;
  }

  // Sends "mine" to its end; while its answer travels, another command's synced Enqueue
  // is made. A rejection or a conflict is synced before anyone hears of it: here that
  // sync never reaches the disk (the power goes out first), so the crash loses its write,
  // as any crash may lose an ACKED one. Returns the record as it ended.
  OutboxRecord RunToTheEnd(Ending ending) {
    switch (ending) {
      case Ending::kAcked:
        upstream_.set_next_reply(FakeUpstream::Ok("applied once"));
        break;
      case Ending::kRejected:
        upstream_.set_next_reply(FakeUpstream::Rejected(9, "INSUFFICIENT_FUNDS: no"));
        break;
      case Ending::kConflict: {
        // Another command took the key first, at the sidecar.
        v1::Command theirs = Command("theirs", "invoice-42", "pay 99");
        theirs.set_tenant("acme");
        FillPayloadHash(&theirs);
        Caller caller;
        caller.tenant = "acme";
        deduper_->Submit(caller, theirs, [](absl::StatusOr<v1::SubmitResponse> r) {
          EXPECT_TRUE(r.ok()) << r.status();
        });
        break;
      }
    }
    EXPECT_TRUE(outbox_->Enqueue(Command("mine", "invoice-42", "pay 10")).ok());
    sidecar_->before_answer = [this, ending] {
      sidecar_->before_answer = nullptr;
      EXPECT_TRUE(outbox_->Enqueue(Command("later", "", "pay 1")).ok());  // synced
      if (ending != Ending::kAcked) agent_fs_->set_drop_wal_syncs(true);
    };
    EXPECT_GE(replayer_->Pump(), 1);
    return Get("mine");
  }

  ManualClock clock_;
  SeededRandom random_{42};
  FakeUpstream upstream_;
  RecordStoreFilters sidecar_filters_{clock_};
  std::unique_ptr<RocksStore> sidecar_rocks_;
  std::unique_ptr<RecordStore> records_;
  std::unique_ptr<AuditLog> audit_;
  std::unique_ptr<PolicyStore> policy_;
  std::unique_ptr<Deduper> deduper_;
  std::unique_ptr<InProcessSidecar> sidecar_;

  std::string agent_dir_ = testing::FreshDir("agent");
  std::shared_ptr<CrashFileSystem> agent_fs_ = NewCrashFileSystem();
  OutboxStore::Filters agent_filters_{clock_};
  std::unique_ptr<RocksStore> agent_rocks_;
  std::unique_ptr<OutboxStore> store_;
  std::unique_ptr<CredentialState> credential_;
  std::unique_ptr<Outbox> outbox_;
  std::unique_ptr<Replayer> replayer_;
};

class TerminalCrashTest : public TerminalCrash, public ::testing::WithParamInterface<Ending> {};

TEST_P(TerminalCrashTest, ALostTerminalWriteIsReconciledToTheSameEnd) {
  OutboxRecord before = RunToTheEnd(GetParam());
  ASSERT_TRUE(IsFinal(before.state())) << v1::OutboxState_Name(before.state());
  int forwards = ForwardsOf("mine");

  CrashAgent();
  // The terminal write was lost: this is the path under test, not a record that
  // happened to survive.
  ASSERT_EQ(Get("mine").state(), v1::UNKNOWN);

  clock_.AdvanceMs(60'000);
  for (int i = 0; i < 5 && !IsFinal(Get("mine").state()); ++i) {
    replayer_->Pump();
    clock_.AdvanceMs(60'000);
  }
  OutboxRecord after = Get("mine");
  EXPECT_EQ(v1::OutboxState_Name(after.state()), v1::OutboxState_Name(before.state()));
  EXPECT_EQ(after.result().SerializeAsString(), before.result().SerializeAsString());
  EXPECT_EQ(after.last_error().reason(), before.last_error().reason());
  EXPECT_EQ(ForwardsOf("mine"), forwards) << "recovery forwarded the command again";
}

// The negative control: a sidecar whose Reconcile trusts the key alone acks the lost
// conflict with the other command's answer. The test above must see that.
TEST_F(TerminalCrash, NegativeControlReconcileByKeyAloneIsCaught) {
  OutboxRecord before = RunToTheEnd(Ending::kConflict);
  ASSERT_EQ(before.state(), v1::CONFLICT);
  CrashAgent();
  ASSERT_EQ(Get("mine").state(), v1::UNKNOWN);
  sidecar_->mismatch_accepted = true;
  clock_.AdvanceMs(60'000);
  replayer_->Pump();
  EXPECT_EQ(Get("mine").state(), v1::ACKED) << "the control did not break the guarantee";
  EXPECT_NE(Get("mine").state(), before.state());
}

INSTANTIATE_TEST_SUITE_P(Endings, TerminalCrashTest,
                         ::testing::Values(Ending::kAcked, Ending::kRejected, Ending::kConflict),
                         [](const auto& info) {
                           switch (info.param) {
                             case Ending::kAcked: return "Acked";
                             case Ending::kRejected: return "Rejected";
                             default: return "Conflict";
                           }
                         });

}  // namespace
}  // namespace eonce
