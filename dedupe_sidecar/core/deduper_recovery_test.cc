// What the Deduper keeps through crashes and time: synced records (with their negative
// controls), duplicates that never answer ahead of the disk, fencing of superseded
// forwards, the retention promise, the audit chain.
#include <optional>
#include <string>
#include <vector>

#include "dedupe_sidecar/core/deduper_test_fixture.h"

namespace eonce {
namespace {

// A record store that holds back the news that an outcome is durable until the test opens
// the gate: the window between an outcome's write (visible) and its fsync, held open.
class GatedRecordStore : public RecordStore {
 public:
  using RecordStore::RecordStore;
  void WhenDurable(Record::State state, RocksStore::DurableFn done) override {
    if (state == Record::COMMITTED || state == Record::FAILED) {
      outcome_waits_++;
      if (!open_) {
        held_.push_back(std::move(done));
        return;
      }
    }
    RecordStore::WhenDurable(state, std::move(done));
  }
  void Open() {
    open_ = true;
    std::vector<RocksStore::DurableFn> held = std::move(held_);
    for (auto& done : held) RecordStore::WhenDurable(Record::COMMITTED, std::move(done));
  }
  size_t held() const { return held_.size(); }
  int outcome_waits() const { return outcome_waits_; }

 private:
  bool open_ = false;
  std::vector<RocksStore::DurableFn> held_;
  int outcome_waits_ = 0;
};

// A duplicate is a read, but it must not answer with an outcome that a power cut could
// still take back: while the outcome's fsync is pending it waits for it too, and once the
// outcome is durable it answers without waiting for anything.
TEST_F(DeduperTest, ADuplicateWaitsForAnOutcomeStillOnItsWayToTheDiskAndOnlyThen) {
  GatedRecordStore gated(*rocks_, clock_, retention_);
  Deduper deduper(gated, *audit_, upstream_, *policy_, clock_, options_);
  Caller caller;
  caller.tenant = "acme";
  caller.workload = "agent";
  v1::Command c = Cmd("c1");
  upstream_.set_next_reply(FakeUpstream::Ok("the answer"));
  std::optional<absl::StatusOr<v1::SubmitResponse>> first, duplicate, later;
  deduper.Submit(caller, c, [&](absl::StatusOr<v1::SubmitResponse> r) { first = r; });
  // Forwarded and written; the answer waits for the fsync.
  EXPECT_EQ(gated.held(), 1u);
  EXPECT_FALSE(first.has_value());

  deduper.Submit(caller, c, [&](absl::StatusOr<v1::SubmitResponse> r) { duplicate = r; });
  // The duplicate joins the wait instead of answering.
  EXPECT_EQ(gated.held(), 2u);
  EXPECT_FALSE(duplicate.has_value());
  gated.Open();
  ASSERT_TRUE(first.has_value() && first->ok());
  ASSERT_TRUE(duplicate.has_value() && duplicate->ok()) << duplicate->status();
  EXPECT_EQ((*duplicate)->disposition(), v1::REPLAYED);
  EXPECT_EQ((*duplicate)->result().response(), "the answer");

  // Durable now: the next duplicate answers without a wait.
  const int waits = gated.outcome_waits();
  deduper.Submit(caller, c, [&](absl::StatusOr<v1::SubmitResponse> r) { later = r; });
  ASSERT_TRUE(later.has_value() && later->ok());
  EXPECT_EQ((*later)->disposition(), v1::REPLAYED);
  EXPECT_EQ(gated.outcome_waits(), waits);
  EXPECT_EQ(upstream_.forwards(), 1u);
}

TEST_F(DeduperTest, ALongerRetentionIsAdvertisedOnlyOnceEveryStoredRecordKeepsIt) {
  v1::Command c = Cmd("c1");
  ASSERT_TRUE(Submit(c).ok());
  EXPECT_EQ(deduper_->Info().retention_ms(), kRetentionMs);

  retention_ = RetentionOptions{20 * kRetentionMs, 20 * kForensicMs};
  int64_t changed_at = clock_.NowMs();
  Restart();
  v1::GetInfoResponse info = deduper_->Info();
  EXPECT_EQ(info.retention_ms(), kRetentionMs);
  EXPECT_EQ(info.configured_retention_ms(), 20 * kRetentionMs);
  EXPECT_EQ(info.retention_full_from_ms(), changed_at + 20 * kRetentionMs);

  // c1's record was written under the old values: past them it is gone, and a resend
  // would be first seen. The advertised retention is what stops an agent from sending.
  clock_.AdvanceMs(kForensicMs + 1);
  EXPECT_EQ(StateOf(c.idempotency_key()), v1::RECORD_NOT_SEEN);
  EXPECT_LT(deduper_->Info().retention_ms(), kForensicMs + 1);

  // A restart in between keeps the promise.
  Restart();
  EXPECT_EQ(deduper_->Info().retention_ms(), kRetentionMs);
  clock_.SetMs(changed_at + 20 * kRetentionMs);
  EXPECT_EQ(deduper_->Info().retention_ms(), 20 * kRetentionMs);
  EXPECT_EQ(deduper_->Info().retention_full_from_ms(), 0);

  // A shorter retention applies at once: stored records only live longer than promised.
  retention_ = RetentionOptions{kRetentionMs / 2, kForensicMs};
  Restart();
  EXPECT_EQ(deduper_->Info().retention_ms(), kRetentionMs / 2);
}

// The same for the forensic retention: a tombstone written before a restart that
// lengthens it keeps the drop time it was written with, so GetInfo advertises the longer
// value only once every such tombstone is gone; until then a late conflict on its key
// would go uncaught past the old value.
TEST_F(DeduperTest, ALongerForensicRetentionIsAdvertisedOnlyOnceEveryTombstoneKeepsIt) {
  v1::Command c = Cmd("c1");
  ASSERT_TRUE(Submit(c).ok());
  EXPECT_EQ(deduper_->Info().forensic_retention_ms(), kForensicMs);

  retention_ = RetentionOptions{kRetentionMs, 20 * kForensicMs};
  const int64_t changed_at = clock_.NowMs();
  Restart();
  EXPECT_EQ(deduper_->Info().forensic_retention_ms(), kForensicMs);

  // c1's tombstone was written under the old value: past it, it is gone, and another
  // payload under its key is no longer caught as a conflict.
  clock_.AdvanceMs(kForensicMs + 1);
  v1::Command late = c;
  late.set_request("transfer 99");
  FillPayloadHash(&late);
  ASSERT_TRUE(Submit(late).ok());
  EXPECT_EQ(deduper_->Info().forensic_retention_ms(), kForensicMs);

  // A restart in between keeps the promise; it is kept in full from change + new value.
  Restart();
  EXPECT_EQ(deduper_->Info().forensic_retention_ms(), kForensicMs);
  clock_.SetMs(changed_at + 20 * kForensicMs);
  EXPECT_EQ(deduper_->Info().forensic_retention_ms(), 20 * kForensicMs);

  // A shorter one applies at once: stored tombstones only live longer than promised.
  retention_ = RetentionOptions{kRetentionMs, kForensicMs / 2};
  Restart();
  EXPECT_EQ(deduper_->Info().forensic_retention_ms(), kForensicMs / 2);
}

struct AfterCrash {
  size_t forwards = 0;
  std::string reason;  // of the duplicate sent after the crash
  bool replayed = false;
  std::string response;
};

class DurabilityTest : public DeduperTest {
 protected:
  // A forward is in flight when the sidecar dies; a duplicate comes after the restart.
  // Held: the started record blocks it (IN_PROGRESS) and nothing is forwarded again.
  AfterCrash ForwardInFlightThenCrash() {
    upstream_.set_hold(true);
    v1::Command c = Cmd("in-flight");
    Caller caller;
    caller.tenant = "acme";
    deduper_->Submit(caller, c, [](auto) {});
    Restart();
    upstream_.set_hold(false);
    auto duplicate = Submit(c);
    return AfterCrash{upstream_.forwards(), ReasonOf(duplicate.status()), false, ""};
  }

  // A command is answered; the sidecar dies; a duplicate comes after the restart.
  // Held: the duplicate gets the stored answer.
  AfterCrash AnsweredThenCrash() {
    upstream_.set_next_reply(FakeUpstream::Ok("the one answer"));
    v1::Command c = Cmd("answered");
    EXPECT_TRUE(Submit(c).ok());
    Restart();
    auto duplicate = Submit(c);
    AfterCrash after{upstream_.forwards(), ReasonOf(duplicate.status()), false, ""};
    if (duplicate.ok()) {
      after.replayed = duplicate->disposition() == v1::REPLAYED;
      after.response = duplicate->result().response();
    }
    return after;
  }
};

TEST_F(DurabilityTest, AStartedRecordSurvivesACrash) {
  AfterCrash after = ForwardInFlightThenCrash();
  EXPECT_EQ(after.forwards, 1u);
  EXPECT_EQ(after.reason, "IN_PROGRESS");
}

TEST_F(DurabilityTest, AnAnsweredOutcomeSurvivesACrash) {
  AfterCrash after = AnsweredThenCrash();
  EXPECT_EQ(after.forwards, 1u);
  EXPECT_TRUE(after.replayed);
  EXPECT_EQ(after.response, "the one answer");
}

TEST_F(DurabilityTest, NegativeControlUnsyncedStartedRecordIsCaught) {
  unsynced_states_ = {Record::STARTED};
  Restart();
  AfterCrash after = ForwardInFlightThenCrash();
  EXPECT_EQ(after.forwards, 2u) << "the control did not break the guarantee";
}

TEST_F(DurabilityTest, NegativeControlUnsyncedOutcomeIsCaught) {
  unsynced_states_ = {Record::COMMITTED, Record::FAILED};
  Restart();
  AfterCrash after = AnsweredThenCrash();
  EXPECT_FALSE(after.replayed) << "the control did not break the guarantee";
  EXPECT_EQ(after.reason, "IN_PROGRESS");
}

// A command the business turned away was not applied, and its answer says the key is
// free. A power cut after that answer must not bring its started record back: the key
// would be held by a command never applied, so its retry would be recovered and, with a
// business that keeps no outcomes to ask (legacy), parked for an operator.
TEST_F(DeduperTest, AKeyFreedByARefusalStaysFreeAfterAPowerCut) {
  v1::Command c = Cmd("c1");
  upstream_.set_next_reply(FakeUpstream::Of(ForwardReply::Kind::kRefused));
  auto refused = Submit(c);
  ASSERT_EQ(ReasonOf(refused.status()), "UPSTREAM_REFUSED");
  Restart();
  clock_.AdvanceMs(kLeaseMs + 1);
  upstream_.set_next_reply(FakeUpstream::Ok("applied"));
  auto retried = Submit(c);
  ASSERT_TRUE(retried.ok()) << retried.status();
  EXPECT_EQ(retried->disposition(), v1::APPLIED);
  EXPECT_EQ(upstream_.forwards(), 2u);
  EXPECT_EQ(upstream_.queries(), 0u);  // nothing left to recover
}

// The same for a key the producer chose: told it is free (the business did not apply the
// call), the producer sends a new command under it, which must not meet the old one's
// record after a power cut (a KEY_REUSED conflict for a key nobody holds).
TEST_F(DeduperTest, AKeyFreedWhenNothingWasAppliedCanBeReusedAfterAPowerCut) {
  v1::Command first = Cmd("c1");
  first.set_idempotency_key("invoice-42");
  upstream_.set_next_reply(FakeUpstream::Of(ForwardReply::Kind::kNotApplied));
  ASSERT_EQ(ReasonOf(Submit(first).status()), "UPSTREAM_UNAVAILABLE");
  Restart();
  v1::Command second = Cmd("c2");  // the same payload
  second.set_idempotency_key("invoice-42");
  upstream_.set_next_reply(FakeUpstream::Ok("applied"));
  auto applied = Submit(second);
  ASSERT_TRUE(applied.ok()) << applied.status();
  EXPECT_EQ(applied->disposition(), v1::APPLIED);
  EXPECT_EQ(upstream_.forwards(), 2u);
}

// Two forwards of one command race: the first's lease ran out, recovery forwarded again
// under a new token, and the first answer comes back late.
struct Race {
  absl::StatusOr<v1::SubmitResponse> stale = absl::InternalError("pending");
  absl::StatusOr<v1::SubmitResponse> fresh = absl::InternalError("pending");
  std::string stored;  // what a duplicate gets afterwards
  int64_t fenced = 0;
};

class FencingTest : public DeduperTest {
 protected:
  Race LateAnswerOfASupersededForward() {
    Race race;
    upstream_.set_hold(true);
    v1::Command c = Cmd("c1");
    Caller caller;
    caller.tenant = "acme";
    deduper_->Submit(caller, c, [&](auto r) { race.stale = r; });
    clock_.AdvanceMs(kLeaseMs + 1);
    upstream_.set_outcome(v1::QueryOutcomeResponse());  // not applied (yet)
    deduper_->Submit(caller, c, [&](auto r) { race.fresh = r; });
    EXPECT_EQ(upstream_.held(), 2u);
    EXPECT_EQ(upstream_.call(1).fencing_token, 2u);
    upstream_.Release(FakeUpstream::Ok("from token 1"));  // the superseded one, late
    upstream_.Release(FakeUpstream::Ok("from token 2"));
    upstream_.set_hold(false);
    auto duplicate = Submit(c);
    race.stored = duplicate.ok() ? duplicate->result().response() : duplicate.status().ToString();
    race.fenced = deduper_->stats().fenced.load();
    return race;
  }
};

TEST_F(FencingTest, LateAnswerOfSupersededForwardNeverOverwritesNewerOutcome) {
  Race race = LateAnswerOfASupersededForward();
  EXPECT_FALSE(race.stale.ok());
  EXPECT_EQ(ReasonOf(race.stale.status()), "IN_PROGRESS");
  ASSERT_TRUE(race.fresh.ok()) << race.fresh.status();
  EXPECT_EQ(race.fresh->result().response(), "from token 2");
  EXPECT_EQ(race.fenced, 1);
  EXPECT_EQ(race.stored, "from token 2");
}

TEST_F(FencingTest, NegativeControlWithoutFencingIsCaught) {
  unfenced_ = true;
  Restart();
  Race race = LateAnswerOfASupersededForward();
  EXPECT_NE(race.stored, "from token 2") << "the control did not break the guarantee";
  EXPECT_TRUE(race.stale.ok());  // the superseded forward's answer was stored
}

TEST_F(DeduperTest, AuditChainVerifiesAndDetectsTampering) {
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(Submit(Cmd("c" + std::to_string(i))).ok());
  v1::Command replay_for_bob = Cmd("c0");  // a stored answer handed to another actor
  replay_for_bob.set_actor("bob");
  ASSERT_TRUE(Submit(replay_for_bob).ok());
  auto verified = audit_->Verify();
  ASSERT_TRUE(verified.ok());
  EXPECT_TRUE(verified->ok());
  EXPECT_EQ(verified->events_checked(), 6u);

  // A crash: audit events are written unsynced (audit_log.h), so the newest ones may
  // go; those a later synced record write carried to disk stay. Verify wrote the six,
  // and c5's synced record writes carry them to disk. The chain continues from the
  // stored head.
  ASSERT_TRUE(Submit(Cmd("c5")).ok());
  Restart();
  uint64_t survived = audit_->Verify()->events_checked();
  EXPECT_GE(survived, 6u);
  EXPECT_LE(survived, 7u);
  ASSERT_TRUE(Submit(Cmd("c9")).ok());
  EXPECT_TRUE(audit_->Verify()->ok());
  EXPECT_EQ(audit_->Verify()->events_checked(), survived + 1);

  // Delete event 3: the gap is found.
  std::string key(8, '\0');
  key[7] = 3;
  ASSERT_TRUE(rocks_->db()->Delete(rocksdb::WriteOptions(), rocks_->cf("audit"), key).ok());
  auto broken = audit_->Verify();
  EXPECT_FALSE(broken->ok());
  EXPECT_EQ(broken->first_bad_seq(), 3u);
}

// Compaction drops events past their retention in no particular order. Such gaps are
// not tampering; a missing event that was still within retention is.
TEST_F(DeduperTest, AuditVerifyAnchorsAfterExpiredEventsAndStillCatchesDeletions) {
  constexpr int64_t kAuditRetentionMs = 10 * kForensicMs;  // as opened by the fixture
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(Submit(Cmd("old" + std::to_string(i))).ok());
  clock_.AdvanceMs(kAuditRetentionMs / 2);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Submit(Cmd("new" + std::to_string(i))).ok());
  ASSERT_TRUE(audit_->Flush().ok());
  clock_.AdvanceMs(kAuditRetentionMs / 2);  // the four old events are past retention
  auto seq_key = [](int seq) {
    std::string key(8, '\0');
    key[7] = static_cast<char>(seq);
    return key;
  };
  // Events are numbered from 1. Compaction happened to drop old event 2 but not yet
  // its neighbours.
  ASSERT_TRUE(rocks_->db()->Delete(rocksdb::WriteOptions(), rocks_->cf("audit"), seq_key(2)).ok());
  auto verified = audit_->Verify();
  ASSERT_TRUE(verified.ok());
  EXPECT_TRUE(verified->ok()) << verified->problem();
  EXPECT_EQ(verified->events_checked(), 3u);

  // A deleted event that was still within retention is found.
  ASSERT_TRUE(rocks_->db()->Delete(rocksdb::WriteOptions(), rocks_->cf("audit"), seq_key(6)).ok());
  auto broken = audit_->Verify();
  EXPECT_FALSE(broken->ok());
  EXPECT_EQ(broken->first_bad_seq(), 6u);
}

// VerifyAudit is bounded per call: page by page it checks every link, across the pages
// too, and a deleted event is found in the page that holds it.
TEST_F(DeduperTest, AuditVerifyGoesPageByPageAndFindsADeletionInALaterPage) {
  for (int i = 0; i < 7; ++i) ASSERT_TRUE(Submit(Cmd("p" + std::to_string(i))).ok());
  auto walk = [&](uint32_t page_size) {
    uint64_t after = 0, checked = 0;
    for (int page = 0; page < 100; ++page) {
      auto r = audit_->Verify(after, page_size);
      EXPECT_TRUE(r.ok());
      checked += r->events_checked();
      if (!r->ok()) return std::make_pair(checked, r->first_bad_seq());
      if (r->next_after_seq() == 0) break;
      after = r->next_after_seq();
    }
    return std::make_pair(checked, uint64_t{0});
  };
  EXPECT_EQ(walk(2), std::make_pair(uint64_t{7}, uint64_t{0}));
  EXPECT_EQ(walk(100), std::make_pair(uint64_t{7}, uint64_t{0}));
  std::string key(8, '\0');
  key[7] = 6;
  ASSERT_TRUE(rocks_->db()->Delete(rocksdb::WriteOptions(), rocks_->cf("audit"), key).ok());
  auto broken = walk(2);
  EXPECT_EQ(broken.second, 6u);  // found across a page boundary (pages of 2: 1-2, 3-4, 5-...)
}

// The background check: bounded steps walk the log in passes, again and again, so an
// event deleted after its pass went by is found on the next pass, and the flag stays up.
TEST_F(DeduperTest, TheBackgroundAuditCheckKeepsWalkingAndFlagsABreak) {
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(Submit(Cmd("b" + std::to_string(i))).ok());
  for (int step = 0; step < 10; ++step) ASSERT_TRUE(audit_->VerifyStep(2).ok());
  EXPECT_FALSE(audit_->chain_broken());
  std::string key(8, '\0');
  key[7] = 2;  // an event the earlier passes already checked
  ASSERT_TRUE(rocks_->db()->Delete(rocksdb::WriteOptions(), rocks_->cf("audit"), key).ok());
  for (int step = 0; step < 4 && !audit_->chain_broken(); ++step) {
    ASSERT_TRUE(audit_->VerifyStep(2).ok());
  }
  EXPECT_TRUE(audit_->chain_broken());
  ASSERT_TRUE(Submit(Cmd("b9")).ok());
  ASSERT_TRUE(audit_->VerifyStep(2).ok());
  EXPECT_TRUE(audit_->chain_broken());  // for good, until a restart on a verified log
}

}  // namespace
}  // namespace eonce
