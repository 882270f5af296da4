// Real concurrency on the same keys: the sidecar's Deduper, answering from its store's
// committer thread, in front of a business that answers on threads of its own, two agents
// (each its own outbox and Replayer, pumping on its own thread) replaying the same
// commands, and six more threads submitting duplicates straight to the Deduper. The
// business keeps no inbox, so every call it receives would be an effect: each command
// must be received exactly once, and every agent must end ACKED with that one answer.
// Bounded: a fixed number of commands and submits, and a deadline on the pumping.
#include <atomic>
#include <cstdio>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/base/clock.h"
#include "common/command/command.h"
#include "common/base/random.h"
#include "common/store/rocks.h"
#include "common/base/status.h"
#include "common/base/work_pool.h"
#include "dedupe_sidecar/core/deduper.h"
#include "dedupe_sidecar/core/negative_controls.h"
#include "gtest/gtest.h"
#include "outbox_agent/core/outbox.h"
#include "outbox_agent/core/replayer.h"
#include "tests/util/in_process_sidecar.h"
#include "tests/util/temp_dir.h"

namespace eonce {
namespace {

// A business without an inbox that takes a little while and answers on its own threads.
class CountingBusiness : public Upstream {
 public:
  void Forward(ForwardCall call, std::function<void(ForwardReply)> done) override {
    bool posted = pool_.Post([this, call = std::move(call), done = std::move(done)] {
      std::this_thread::sleep_for(std::chrono::microseconds(random_.Uniform(500)));
      {
        absl::MutexLock lock(&mu_);
        received_[call.command_id]++;
      }
      ForwardReply reply;
      reply.kind = ForwardReply::Kind::kAnswered;
      reply.result.set_response("applied:" + call.command_id);
      done(std::move(reply));
    });
    if (!posted) {
      ForwardReply refused;
      refused.kind = ForwardReply::Kind::kNotApplied;
      refused.detail = "business queue full";
      done(std::move(refused));
    }
  }
  void QueryOutcome(const std::string&, const std::string&, int64_t,
                    std::function<void(absl::StatusOr<v1::QueryOutcomeResponse>)> done) override {
    done(absl::UnimplementedError("no inbox"));
  }
  bool Reachable() override { return true; }

  std::map<std::string, int> received() {
    absl::MutexLock lock(&mu_);
    return received_;
  }

 private:
  SeededRandom random_{99};
  absl::Mutex mu_;
  std::map<std::string, int> received_ ABSL_GUARDED_BY(mu_);
  WorkPool pool_{8, 100'000};
};

struct Agent {
  std::unique_ptr<RocksStore> rocks;
  std::unique_ptr<OutboxStore> store;
  std::unique_ptr<CredentialState> credential;
  std::unique_ptr<Outbox> outbox;
  std::unique_ptr<Replayer> replayer;
};

class ConcurrencyStressTest : public ::testing::Test {
 protected:
  struct Outcome {
    std::map<std::string, int> received;
    int64_t acked = 0;           // agent records ACKED with the command's own answer
    int64_t other_states = 0;    // agent records in any other state at the end
    int64_t direct_ok = 0, direct_in_progress = 0, direct_other = 0;
  };

  // Runs the whole scenario against a record store made by `make_store`.
  Outcome Run(int commands, int64_t deadline_ms,
              const std::function<std::unique_ptr<RecordStore>(RocksStore&)>& make_store) {
    auto families = RecordStore::ColumnFamilies(filters_);
    for (auto& f : AuditLog::ColumnFamilies(filters_)) families.push_back(f);
    auto rocks = RocksStore::Open(testing::FreshDir("sidecar"), families, StoreOptions());
    EXPECT_TRUE(rocks.ok()) << rocks.status();
    std::unique_ptr<RocksStore> sidecar_rocks = std::move(*rocks);
    std::unique_ptr<RecordStore> records = make_store(*sidecar_rocks);
    EXPECT_TRUE(records->SettleRetention().ok());
    AuditLog audit(*sidecar_rocks, clock_, 24LL * 3600 * 1000);
    auto policy = std::move(*PolicyStore::Open(""));
    CountingBusiness business;
    Deduper deduper(*records, audit, business, *policy, clock_, DeduperOptions());
    testing::InProcessSidecar sidecar(deduper);

    std::vector<v1::Command> all;
    for (int i = 0; i < commands; ++i) {
      v1::Command c;
      c.set_command_id(absl::StrCat("cmd-", i));
      c.set_target_method("/eonce.ledger.v1.Ledger/Transfer");
      c.set_request(absl::StrCat("transfer ", i));
      c.mutable_entity()->set_type("account");
      c.mutable_entity()->set_id(absl::StrCat("a", i % 20));
      all.push_back(c);
    }

    std::vector<Agent> agents(2);
    for (size_t a = 0; a < agents.size(); ++a) {
      Agent& agent = agents[a];
      auto opened = RocksStore::Open(testing::FreshDir(absl::StrCat("agent", a)),
                                     OutboxStore::ColumnFamilies(agent_filters_), StoreOptions());
      EXPECT_TRUE(opened.ok()) << opened.status();
      agent.rocks = std::move(*opened);
      agent.store = std::make_unique<OutboxStore>(*agent.rocks, clock_, OutboxStoreOptions());
      agent.credential = std::move(*CredentialState::Load(*agent.store, "acme", "agent", 1));
      agent.outbox = std::make_unique<Outbox>(*agent.store, *agent.credential, clock_, random_,
                                              CommandLimits());
      ReplayerOptions replay;
      replay.owner = absl::StrCat("agent", a);
      replay.retry.base_backoff_ms = 5;
      replay.retry.max_backoff_ms = 200;
      replay.retry.max_attempts = 100'000;
      agent.replayer = std::make_unique<Replayer>(*agent.store, sidecar, *agent.credential,
                                                  clock_, random_, replay);
      for (const v1::Command& c : all) EXPECT_TRUE(agent.outbox->Enqueue(c).ok());
    }

    Outcome out;
    std::atomic<int64_t> direct_ok{0}, direct_in_progress{0}, direct_other{0};
    std::vector<std::thread> threads;
    for (Agent& agent : agents) {
      threads.emplace_back([&, &agent = agent] {
        const int64_t until = clock_.NowMs() + deadline_ms;
        while (clock_.NowMs() < until) {
          agent.replayer->Pump();
          auto counts = agent.store->CountsByState();
          if (counts[v1::ACKED] == commands && agent.replayer->in_flight() == 0) break;
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        while (agent.replayer->in_flight() > 0) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
      });
    }
    for (int t = 0; t < 6; ++t) {
      threads.emplace_back([&, t] {
        SeededRandom pick(1000 + t);
        for (int i = 0; i < 300; ++i) {
          v1::Command c = all[pick.Uniform(all.size())];
          c.set_tenant("acme");
          c.set_idempotency_key(DeriveIdempotencyKey(c));
          FillPayloadHash(&c);
          Caller caller;
          caller.tenant = "acme";
          absl::Notification answered;
          absl::StatusOr<v1::SubmitResponse> answer = absl::InternalError("unset");
          deduper.Submit(caller, c, [&](absl::StatusOr<v1::SubmitResponse> r) {
            answer = std::move(r);
            answered.Notify();
          });
          answered.WaitForNotification();
          if (answer.ok() && answer->result().response() == "applied:" + c.command_id()) {
            direct_ok++;
          } else if (!answer.ok() && ReasonOf(answer.status()) == "IN_PROGRESS") {
            direct_in_progress++;
          } else {
            direct_other++;
          }
        }
      });
    }
    for (auto& t : threads) t.join();

    out.received = business.received();
    for (Agent& agent : agents) {
      for (const v1::Command& c : all) {
        auto record = agent.store->Get(c.command_id());
        if (record.ok() && record->has_value() && (*record)->state() == v1::ACKED &&
            (*record)->result().response() == "applied:" + c.command_id()) {
          out.acked++;
        } else {
          out.other_states++;
        }
      }
    }
    out.direct_ok = direct_ok;
    out.direct_in_progress = direct_in_progress;
    out.direct_other = direct_other;
    for (Agent& agent : agents) {
      agent.replayer.reset();
      agent.outbox.reset();
      agent.credential.reset();
      agent.store.reset();
      agent.rocks.reset();
    }
    return out;
  }

  RealClock& clock_ = RealClock::Get();
  SeededRandom random_{7};
  RecordStoreFilters filters_{clock_};
  OutboxStore::Filters agent_filters_{clock_};
};

TEST_F(ConcurrencyStressTest, EveryCommandReachesTheBusinessOnceUnderConcurrentDuplicates) {
  constexpr int kCommands = 200;
  Outcome out = Run(kCommands, 60'000, [&](RocksStore& rocks) {
    return std::make_unique<RecordStore>(rocks, clock_, RetentionOptions());
  });
  std::printf("stress: commands=%d received=%zu agent_acks=%lld direct_ok=%lld "
              "direct_in_progress=%lld direct_other=%lld\n",
              kCommands, out.received.size(), static_cast<long long>(out.acked),
              static_cast<long long>(out.direct_ok), static_cast<long long>(out.direct_in_progress),
              static_cast<long long>(out.direct_other));
  EXPECT_EQ(out.received.size(), static_cast<size_t>(kCommands));
  for (const auto& [id, n] : out.received) EXPECT_EQ(n, 1) << id << " reached the business " << n;
  EXPECT_EQ(out.acked, 2 * kCommands);
  EXPECT_EQ(out.other_states, 0);
  EXPECT_EQ(out.direct_ok + out.direct_in_progress, 6 * 300);
  EXPECT_EQ(out.direct_other, 0);
  EXPECT_GT(out.direct_ok, 0);
}

// The negative control: a sidecar that remembers nothing. The same counts must see it.
TEST_F(ConcurrencyStressTest, NegativeControlForgettingSidecarIsCaught) {
  constexpr int kCommands = 40;
  Outcome out = Run(kCommands, 3'000, [&](RocksStore& rocks) {
    return std::make_unique<ForgettingRecordStore>(rocks, clock_, RetentionOptions());
  });
  int repeated = 0;
  for (const auto& [id, n] : out.received) repeated += n > 1;
  EXPECT_GT(repeated, 0) << "the control did not break the guarantee";
}

}  // namespace
}  // namespace eonce
