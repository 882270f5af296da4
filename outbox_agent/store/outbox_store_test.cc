#include "outbox_agent/store/outbox_store.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "outbox_agent/store/outbox_store_test_fixture.h"

namespace eonce {
namespace {

TEST_F(OutboxStoreTest, InsertIsIdempotentByCommandIdAndRefusesAnotherPayload) {
  auto first = store_->Insert(Cmd("c1", "a"));
  ASSERT_TRUE(first.ok());
  EXPECT_TRUE(first->second);
  EXPECT_EQ(first->first.state(), v1::QUEUED);
  auto again = store_->Insert(Cmd("c1", "a"));
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->second);
  EXPECT_EQ(again->first.enqueue_seq(), first->first.enqueue_seq());
  auto other = store_->Insert(Cmd("c1", "a", "another payload"));
  EXPECT_EQ(other.status().code(), absl::StatusCode::kAlreadyExists);
}

TEST_F(OutboxStoreTest, OnlyTheHeadOfEachLaneIsDue) {
  ASSERT_TRUE(store_->Insert(Cmd("a1", "a")).ok());
  ASSERT_TRUE(store_->Insert(Cmd("a2", "a")).ok());
  ASSERT_TRUE(store_->Insert(Cmd("b1", "b")).ok());
  ASSERT_TRUE(store_->Insert(Cmd("a3", "a")).ok());
  EXPECT_EQ(Due(), (std::vector<std::string>{"a1", "b1"}));
  ASSERT_TRUE(Move("a1", v1::ACKED).ok());
  EXPECT_EQ(Due(), (std::vector<std::string>{"a2", "b1"}));
  // A dead letter keeps its lane blocked; dropping it releases the lane.
  ASSERT_TRUE(Move("a2", v1::DEAD_LETTERED).ok());
  EXPECT_EQ(Due(), (std::vector<std::string>{"b1"}));
  ASSERT_TRUE(Move("a2", v1::DROPPED).ok());
  EXPECT_EQ(Due(), (std::vector<std::string>{"a3", "b1"}));
}

// A new record is not due before its insert is durable (MarkDurable), not even when the
// command before it in its lane finishes meanwhile: no attempt goes out, and no attempt's
// state is announced, for a command that a crash can still take back.
TEST_F(OutboxStoreTest, ANewRecordIsDueOnlyOnceItsInsertIsDurable) {
  ASSERT_TRUE(store_->Insert(Cmd("a1", "a")).ok());
  ASSERT_TRUE(InsertNotMarked(Cmd("b1", "b")).ok());
  ASSERT_TRUE(InsertNotMarked(Cmd("a2", "a")).ok());
  EXPECT_EQ(Due(), (std::vector<std::string>{"a1"}));
  ASSERT_TRUE(Move("a1", v1::ACKED).ok());  // would promote a2
  EXPECT_EQ(Due(), (std::vector<std::string>{}));
  store_->MarkDurable("b1");
  EXPECT_EQ(Due(), (std::vector<std::string>{"b1"}));
  store_->MarkDurable("a2");
  EXPECT_EQ(Due(), (std::vector<std::string>{"a2", "b1"}));
}

// An insert's batch waits for the committer. Meanwhile a second Enqueue of the id finds it
// (and is answered only once the first is durable, as created = false), another payload
// is refused at once, and nothing else sees the record: nothing has acknowledged it.
TEST_F(OutboxStoreTest, AnInsertOnItsWayToTheStoreIsFoundByASecondInsertOfItsId) {
  ASSERT_TRUE(store_->Insert(Cmd("held", "h")).ok());
  std::shared_ptr<absl::Notification> release = HoldCommitter();
  // Shared with the callbacks, which a broken store may call after the test gave up.
  struct Answers {
    absl::Mutex mu;
    std::vector<absl::StatusOr<OutboxStore::Inserted>> by_order;
    size_t size() {
      absl::MutexLock lock(&mu);
      return by_order.size();
    }
  };
  auto answers = std::make_shared<Answers>();
  auto collect = [answers](absl::StatusOr<OutboxStore::Inserted> r) {
    absl::MutexLock lock(&answers->mu);
    answers->by_order.push_back(std::move(r));
  };
  store_->InsertWhenDurable(Cmd("c1", "a"), collect);
  store_->InsertWhenDurable(Cmd("c1", "a"), collect);
  EXPECT_EQ(answers->size(), 0u) << "answered before the batch was written";
  store_->InsertWhenDurable(Cmd("c1", "a", "other"), collect);  // refused at once
  ASSERT_EQ(answers->size(), 1u) << "another payload for the id was not refused at once";
  EXPECT_EQ(answers->by_order[0].status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_FALSE(store_->Get("c1")->has_value());
  EXPECT_EQ(store_->Mutate("c1", "test", [](OutboxRecord*) { return absl::OkStatus(); }, false)
                .status()
                .code(),
            absl::StatusCode::kNotFound);
  release->Notify();
  ASSERT_TRUE(store_->Insert(Cmd("after", "b")).ok());  // answered after the two
  absl::MutexLock lock(&answers->mu);
  ASSERT_EQ(answers->by_order.size(), 3u);
  ASSERT_TRUE(answers->by_order[1].ok()) << answers->by_order[1].status();
  ASSERT_TRUE(answers->by_order[2].ok()) << answers->by_order[2].status();
  EXPECT_TRUE(answers->by_order[1]->second);
  EXPECT_FALSE(answers->by_order[2]->second) << "the second insert of the id made a record";
  EXPECT_EQ(answers->by_order[2]->first.enqueue_seq(), answers->by_order[1]->first.enqueue_seq());
  EXPECT_EQ(store_->CountsByState()[v1::QUEUED], 2);  // c1 once, and after
  EXPECT_TRUE(store_->Get("c1")->has_value());
}

// A batch that never reaches the store is undone in memory too: no longer counted or
// pending, and the insert of the id that waited on it gets the error.
TEST_F(OutboxStoreTest, AnInsertWhoseBatchIsNeverWrittenLeavesNothingBehind) {
  ASSERT_TRUE(store_->Insert(Cmd("held", "h")).ok());
  ASSERT_TRUE(store_->Insert(Cmd("a1", "a")).ok());
  std::shared_ptr<absl::Notification> release = HoldCommitter();
  absl::Notification first_answered, second_answered;
  absl::Status first, second;
  store_->InsertWhenDurable(Cmd("a2", "a"), [&](absl::StatusOr<OutboxStore::Inserted> r) {
    first = r.status();
    first_answered.Notify();
  });
  store_->InsertWhenDurable(Cmd("a2", "a"), [&](absl::StatusOr<OutboxStore::Inserted> r) {
    second = r.status();
    second_answered.Notify();
  });
  EXPECT_EQ(store_->CountsByState()[v1::QUEUED], 2);
  rocks_->MarkFailed();  // the batch's write is refused
  release->Notify();
  ASSERT_TRUE(first_answered.WaitForNotificationWithTimeout(absl::Seconds(10)));
  ASSERT_TRUE(second_answered.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(first.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(second.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(store_->CountsByState()[v1::QUEUED], 1);
  // Not pending any more: a new insert of the id is answered (refused by the failed
  // store) rather than left waiting on a batch that is gone.
  absl::Notification third_answered;
  store_->InsertWhenDurable(Cmd("a2", "a"), [&](absl::StatusOr<OutboxStore::Inserted> r) {
    EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
    third_answered.Notify();
  });
  EXPECT_TRUE(third_answered.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(Due(), (std::vector<std::string>{"a1", "held"}));
}

TEST_F(OutboxStoreTest, LaneOrderSurvivesARestart) {
  ASSERT_TRUE(store_->Insert(Cmd("a1", "a")).ok());
  ASSERT_TRUE(store_->Insert(Cmd("a2", "a")).ok());
  Open();
  // The lanes come back from the store: a new command of the entity waits its turn, and
  // finishing the head makes the next one due.
  ASSERT_TRUE(store_->Insert(Cmd("a3", "a")).ok());
  ASSERT_TRUE(store_->Insert(Cmd("b1", "b")).ok());
  EXPECT_EQ(Due(), (std::vector<std::string>{"a1", "b1"}));
  ASSERT_TRUE(Move("a1", v1::ACKED).ok());
  EXPECT_EQ(Due(), (std::vector<std::string>{"a2", "b1"}));
  ASSERT_TRUE(Move("a2", v1::ACKED).ok());
  EXPECT_EQ(Due(), (std::vector<std::string>{"a3", "b1"}));
}

TEST_F(OutboxStoreTest, TheDueQueueIsRebuiltAtOpen) {
  const int64_t t0 = clock_.NowMs();
  ASSERT_TRUE(store_->Insert(Cmd("a1", "a")).ok());
  ASSERT_TRUE(store_->Insert(Cmd("a2", "a")).ok());
  ASSERT_TRUE(store_->Insert(Cmd("b1", "b")).ok());
  ASSERT_TRUE(store_->Insert(Cmd("c1", "c")).ok());
  ASSERT_TRUE(store_->Mutate("b1", "retry", [&](OutboxRecord* r) {
                       r->set_state(v1::RETRYABLE_FAILED);
                       r->set_next_attempt_at_ms(t0 + 500);
                       return absl::OkStatus();
                     }, /*sync=*/true).ok());
  ASSERT_TRUE(store_->Mutate("c1", "claimed", [&](OutboxRecord* r) {
                       r->set_state(v1::SENDING);
                       r->mutable_claim()->set_token(7);
                       r->mutable_claim()->set_expires_at_ms(t0 + 1000);
                       return absl::OkStatus();
                     }, /*sync=*/true).ok());
  Open();
  // Nothing on disk lists what is due: it comes back from the waiting records. The head
  // of each lane at its own time (a retry at its next attempt, a claim at its expiry),
  // and a later command of a lane not at all.
  EXPECT_EQ(Due(), std::vector<std::string>{"a1"});
  EXPECT_EQ(store_->NextDueMs(), t0);
  clock_.AdvanceMs(500);
  EXPECT_EQ(Due(), (std::vector<std::string>{"a1", "b1"}));
  clock_.AdvanceMs(500);
  EXPECT_EQ(Due(), (std::vector<std::string>{"a1", "b1", "c1"}));
  ASSERT_TRUE(Move("a1", v1::ACKED).ok());
  EXPECT_EQ(Due(), (std::vector<std::string>{"a2", "b1", "c1"}));
}

TEST_F(OutboxStoreTest, TheDueColumnFamilyOfEarlierVersionsIsEmptiedAtOpen) {
  rocksdb::WriteOptions synced;
  synced.sync = true;
  ASSERT_TRUE(rocks_->db()->Put(synced, rocks_->cf("due"),
                                std::string(7, '\0') + "\x01old", "")
                  .ok());
  Open();
  std::unique_ptr<rocksdb::Iterator> it = rocks_->NewIterator("due");
  it->SeekToFirst();
  EXPECT_FALSE(it->Valid());
  EXPECT_TRUE(Due().empty());  // and what it held is not taken for due
}

TEST_F(OutboxStoreTest, DueFollowsNextAttemptTime) {
  ASSERT_TRUE(store_->Insert(Cmd("c1", "a")).ok());
  ASSERT_TRUE(store_->Mutate("c1", "retry", [&](OutboxRecord* r) {
                       r->set_state(v1::RETRYABLE_FAILED);
                       r->set_next_attempt_at_ms(clock_.NowMs() + 500);
                       return absl::OkStatus();
                     }, false).ok());
  EXPECT_TRUE(Due().empty());
  EXPECT_EQ(*store_->NextDueMs(), clock_.NowMs() + 500);
  clock_.AdvanceMs(500);
  EXPECT_EQ(Due(), std::vector<std::string>{"c1"});
}

TEST_F(OutboxStoreTest, MutateAbortsCleanlyAndKeepsAShortHistory) {
  ASSERT_TRUE(store_->Insert(Cmd("c1", "a")).ok());
  auto aborted = store_->Mutate("c1", "no", [](OutboxRecord*) {
    return absl::AbortedError("stale");
  }, false);
  EXPECT_EQ(aborted.status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ((*store_->Get("c1"))->state(), v1::QUEUED);
  for (int i = 0; i < 40; ++i) {
    ASSERT_TRUE(Move("c1", i % 2 ? v1::QUEUED : v1::RETRYABLE_FAILED).ok());
  }
  EXPECT_EQ((*store_->Get("c1"))->history_size(), 16);
  EXPECT_EQ(store_->Mutate("missing", "x", [](OutboxRecord*) { return absl::OkStatus(); }, false)
                .status()
                .code(),
            absl::StatusCode::kNotFound);
}

TEST_F(OutboxStoreTest, MutateManyMovesEachRecordAsItsMutateWouldAndAnAbortAlone) {
  for (const char* id : {"c1", "c2", "c3"}) ASSERT_TRUE(store_->Insert(Cmd(id, id)).ok());
  auto moved = store_->MutateMany(
      {SetState("c1", v1::ACKED),
       {"c2", "refused", [](OutboxRecord*) { return absl::AbortedError("claim taken over"); }},
       SetState("c3", v1::REJECTED), SetState("missing", v1::ACKED)});
  ASSERT_EQ(moved.size(), 4u);
  ASSERT_TRUE(moved[0].ok()) << moved[0].status();
  EXPECT_EQ(moved[0]->state(), v1::ACKED);
  EXPECT_EQ(moved[1].status().code(), absl::StatusCode::kAborted);
  ASSERT_TRUE(moved[2].ok()) << moved[2].status();
  EXPECT_EQ(moved[3].status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ((*store_->Get("c1"))->state(), v1::ACKED);
  EXPECT_EQ((*store_->Get("c2"))->state(), v1::QUEUED);
  EXPECT_EQ((*store_->Get("c3"))->state(), v1::REJECTED);
  EXPECT_EQ((*store_->Get("c1"))->history().rbegin()->why(), "test");
  auto counts = store_->CountsByState();
  EXPECT_EQ(counts[v1::ACKED], 1);
  EXPECT_EQ(counts[v1::QUEUED], 1);
  EXPECT_EQ(counts[v1::REJECTED], 1);
  EXPECT_EQ(Due(), std::vector<std::string>{"c2"});
  EXPECT_EQ(store_->List(v1::ACKED, "", 10)->size(), 1u);
}

// Two changes of one command, or of one entity, read what the one before wrote: they go in
// separate writes, as two Mutates would.
TEST_F(OutboxStoreTest, MutateManyAppliesChangesOfOneCommandOrEntityInOrder) {
  ASSERT_TRUE(store_->Insert(Cmd("c1", "a")).ok());
  auto bump = [](OutboxRecord* r) {
    r->set_attempt(r->attempt() + 1);
    return absl::OkStatus();
  };
  auto moved = store_->MutateMany({{"c1", "one", bump}, {"c1", "two", bump}});
  ASSERT_TRUE(moved[1].ok()) << moved[1].status();
  EXPECT_EQ((*store_->Get("c1"))->attempt(), 2u) << "the second change lost the first";

  // The second command of an entity waits behind the first. Moving it to a later attempt,
  // then acking the first, makes it due at that later time: the ack reads its new time.
  ASSERT_TRUE(store_->Insert(Cmd("c2", "b")).ok());
  ASSERT_TRUE(store_->Insert(Cmd("c3", "b")).ok());
  const int64_t later = clock_.NowMs() + 1'000;
  moved = store_->MutateMany({SetState("c3", v1::RETRYABLE_FAILED, later),
                              SetState("c2", v1::ACKED)});
  ASSERT_TRUE(moved[0].ok() && moved[1].ok());
  EXPECT_EQ(Due(), std::vector<std::string>{"c1"}) << "c3 is due only at its later attempt";
  clock_.AdvanceMs(1'000);
  EXPECT_EQ(Due(), (std::vector<std::string>{"c1", "c3"}));
}

TEST_F(OutboxStoreTest, MutateManyWhoseWriteFailsChangesNothing) {
  ASSERT_TRUE(store_->Insert(Cmd("c1", "a")).ok());
  ASSERT_TRUE(store_->Insert(Cmd("c2", "b")).ok());
  rocks_->MarkFailed();
  auto moved = store_->MutateMany({SetState("c1", v1::ACKED), SetState("c2", v1::ACKED)});
  for (const auto& m : moved) EXPECT_EQ(m.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ((*store_->Get("c1"))->state(), v1::QUEUED);
  EXPECT_EQ(store_->CountsByState()[v1::QUEUED], 2);
  EXPECT_EQ(store_->CountsByState()[v1::ACKED], 0);
  EXPECT_EQ(Due(), (std::vector<std::string>{"c1", "c2"}));
}

TEST_F(OutboxStoreTest, CountsListingAndOldestWaiting) {
  ASSERT_TRUE(store_->Insert(Cmd("c1", "a")).ok());
  clock_.AdvanceMs(1000);
  ASSERT_TRUE(store_->Insert(Cmd("c2", "b")).ok());
  ASSERT_TRUE(store_->Insert(Cmd("c3", "c")).ok());
  ASSERT_TRUE(Move("c3", v1::ACKED).ok());
  auto counts = store_->CountsByState();
  EXPECT_EQ(counts[v1::QUEUED], 2);
  EXPECT_EQ(counts[v1::ACKED], 1);
  EXPECT_EQ(*store_->OldestWaitingAgeMs(), 1000);
  auto queued = store_->List(v1::QUEUED, "", 10);
  ASSERT_EQ(queued->size(), 2u);
  EXPECT_EQ((*queued)[0].command().command_id(), "c1");  // enqueue order
  auto page2 = store_->List(v1::QUEUED, "c1", 10);
  ASSERT_EQ(page2->size(), 1u);
  EXPECT_EQ((*page2)[0].command().command_id(), "c2");
  // Counts survive a crash (a synced write carries the unsynced transition with it).
  ASSERT_TRUE(store_->Insert(Cmd("c4", "d")).ok());
  Open();
  EXPECT_EQ(store_->CountsByState()[v1::QUEUED], 3);
  EXPECT_EQ(store_->CountsByState()[v1::ACKED], 1);
}

// Pages across states: each record once, whatever state the page boundaries fall in.
TEST_F(OutboxStoreTest, ListingEveryStatePageByPageSeesEachRecordOnce) {
  for (int i = 0; i < 25; ++i) {
    std::string id = absl::StrCat("c", i);
    ASSERT_TRUE(store_->Insert(Cmd(id, id)).ok());
    if (i % 5 == 0) {
      ASSERT_TRUE(Move(id, v1::REJECTED).ok());
    }
    if (i % 5 == 1) {
      ASSERT_TRUE(Move(id, v1::ACKED).ok());
    }
  }
  std::vector<std::string> seen;
  std::string after;
  for (int page = 0; page < 20; ++page) {
    auto records = store_->List(v1::OUTBOX_STATE_UNSPECIFIED, after, 4);
    ASSERT_TRUE(records.ok()) << records.status();
    if (records->empty()) break;
    for (const auto& r : *records) seen.push_back(r.command().command_id());
    after = records->back().command().command_id();
  }
  std::set<std::string> distinct(seen.begin(), seen.end());
  EXPECT_EQ(seen.size(), 25u);
  EXPECT_EQ(distinct.size(), 25u);
  // An anchor that is gone is refused rather than silently restarting the listing.
  EXPECT_EQ(store_->List(v1::OUTBOX_STATE_UNSPECIFIED, "missing", 4).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(OutboxStoreTest, FullOutboxRefusesNewCommands) {
  OutboxStoreOptions options;
  options.max_pending_records = 2;
  Open(options);
  ASSERT_TRUE(store_->Insert(Cmd("c1", "a")).ok());
  ASSERT_TRUE(store_->Insert(Cmd("c2", "a")).ok());
  EXPECT_EQ(store_->Insert(Cmd("c3", "a")).status().code(), absl::StatusCode::kResourceExhausted);
  ASSERT_TRUE(Move("c1", v1::ACKED).ok());
  EXPECT_TRUE(store_->Insert(Cmd("c3", "a")).ok());
}

TEST_F(OutboxStoreTest, RestartTurnsInFlightRecordsUnknownAndDue) {
  ASSERT_TRUE(store_->Insert(Cmd("c1", "a")).ok());
  ASSERT_TRUE(store_->Insert(Cmd("c2", "b")).ok());
  ASSERT_TRUE(store_->Mutate("c1", "claimed", [&](OutboxRecord* r) {
                       r->set_state(v1::CLAIMED);
                       r->mutable_claim()->set_token(7);
                       r->mutable_claim()->set_expires_at_ms(clock_.NowMs() + 30'000);
                       return absl::OkStatus();
                     }, false).ok());
  ASSERT_TRUE(Move("c2", v1::SENDING).ok());
  ASSERT_TRUE(store_->Insert(Cmd("c3", "c")).ok());  // synced: the moves above are durable
  Open();
  EXPECT_EQ(*store_->RecoverAfterRestart(), 2);
  for (const char* id : {"c1", "c2"}) {
    auto r = store_->Get(id);
    EXPECT_EQ((*r)->state(), v1::UNKNOWN) << id;
    EXPECT_FALSE((*r)->has_claim());
  }
  EXPECT_EQ(Due(), (std::vector<std::string>{"c1", "c2", "c3"}));
}

TEST_F(OutboxStoreTest, FinalRecordsAreDroppedAfterForensicRetention) {
  OutboxStoreOptions options;
  options.forensic_retention_ms = 1000;
  Open(options);
  ASSERT_TRUE(store_->Insert(Cmd("done", "a")).ok());
  ASSERT_TRUE(store_->Insert(Cmd("dead", "b")).ok());
  ASSERT_TRUE(Move("done", v1::ACKED).ok());
  ASSERT_TRUE(Move("dead", v1::DEAD_LETTERED).ok());
  clock_.AdvanceMs(1000);
  ASSERT_TRUE(store_->CompactAll().ok());
  EXPECT_FALSE(store_->Get("done")->has_value());
  EXPECT_TRUE(store_->Get("dead")->has_value());  // waits for an operator
  EXPECT_GE(filters_.stats.dropped.load(), 1);
}

// Enqueue says yes only to what a crash cannot take back; transitions are unsynced and
// a crash may take them back, to a state a restart reconciles.
TEST_F(OutboxStoreTest, AnEnqueuedCommandSurvivesACrashAndAnUnsyncedMoveMayNot) {
  ASSERT_TRUE(store_->Insert(Cmd("c1", "a")).ok());
  ASSERT_TRUE(Move("c1", v1::SENDING).ok());
  Open();
  auto r = store_->Get("c1");
  ASSERT_TRUE(r.ok() && r->has_value()) << "an acknowledged Enqueue was lost";
  EXPECT_EQ((*r)->state(), v1::QUEUED);
}


TEST_F(OutboxStoreTest, CredentialPersists) {
  EXPECT_EQ(store_->LoadCredential()->first, 0);
  ASSERT_TRUE(store_->SaveCredential(5, true).ok());
  Open();
  auto saved = store_->LoadCredential();
  EXPECT_EQ(saved->first, 5);
  EXPECT_TRUE(saved->second);
}

}  // namespace
}  // namespace eonce
