// The sharded ledger (cross_slot_credits): a transfer between two slots is a debit on the
// source shard that emits a Credit through the inbox's outbox, relayed to the destination
// shard. Two real stores, one per shard; the relay here is the test's own loop.
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/rpc/error_details.h"
#include "common/coord/slots.h"
#include "common/base/status.h"
#include "gtest/gtest.h"
#include "services/ledger/ledger.h"
#include "tests/util/temp_dir.h"

namespace eonce {
namespace {

struct LedgerShard {
  explicit LedgerShard(Clock& clock, const std::string& name) {
    auto families = LedgerCore::ColumnFamilies();
    for (auto& f : Inbox::ColumnFamilies(clock)) families.push_back(f);
    auto opened = RocksStore::Open(testing::FreshDir(name), families, StoreOptions());
    EXPECT_TRUE(opened.ok()) << opened.status();
    store = std::move(*opened);
    inbox = std::make_unique<Inbox>(*store, clock, /*legacy_mode=*/false);
    LedgerOptions options;
    options.cross_slot_credits = true;
    core = std::make_unique<LedgerCore>(*store, *inbox, options);
  }
  std::unique_ptr<RocksStore> store;
  std::unique_ptr<Inbox> inbox;
  std::unique_ptr<LedgerCore> core;
};

CallIdentity Id(const std::string& command_id, const std::string& tenant = "acme") {
  CallIdentity id;
  id.command_id = command_id;
  id.tenant = tenant;
  return id;
}

std::string ReasonOf(const v1::CallResult& result) {
  std::optional<v1::Rejection> rejection = RejectionOf(result.error_details());
  return rejection.has_value() ? rejection->reason() : "";
}

class LedgerShardsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(SlotOf("acme", "account", "alice"), SlotOf("acme", "account", "bob"));
    Open(a_, "alice", 100);
    Open(b_, "bob", 50);
  }

  // `id` as a sharded sidecar forwards it: the account's entity, its slot and the epoch of
  // the map every sidecar holds (epoch_; MoveSlot moves it on).
  CallIdentity Sharded(CallIdentity id, const std::string& account) {
    id.entity_type = "account";
    id.entity_id = account;
    id.slot = SlotOf(id.tenant, "account", account);
    id.slot_epoch = epoch_;
    return id;
  }

  // Freezes `slot` (the map one epoch on) and copies its rows from one shard to the other,
  // as the mover does.
  void CopySlot(LedgerShard& from, LedgerShard& to, uint32_t slot) {
    ++epoch_;
    v1::ExportSlotDataRequest out;
    out.set_first_slot(slot);
    out.set_last_slot(slot);
    out.set_epoch(epoch_);
    auto exported = from.inbox->ExportSlotData(out);
    ASSERT_TRUE(exported.ok()) << exported.status();
    ASSERT_TRUE(exported->next_after().empty());
    v1::ImportSlotDataRequest in;
    in.set_first_slot(slot);
    in.set_last_slot(slot);
    in.set_epoch(epoch_);
    *in.mutable_rows() = exported->rows();
    ASSERT_TRUE(to.inbox->ImportSlotData(in).ok());
  }

  // What the owner's sidecar tells its business once it holds a map at epoch_ that gives
  // it `slot`.
  void HoldSlot(LedgerShard& owner, uint32_t slot) {
    v1::HoldSlotDataRequest hold;
    hold.set_first_slot(slot);
    hold.set_last_slot(slot);
    hold.set_epoch(epoch_);
    ASSERT_TRUE(owner.inbox->HoldSlotData(hold).ok());
  }

  // Moves `slot`'s rows from one shard to the other, as the mover does: freeze and copy,
  // flip (one more epoch; the new owner holds the slot), then drop the old copy.
  void MoveSlot(LedgerShard& from, LedgerShard& to, uint32_t slot) {
    CopySlot(from, to, slot);
    ++epoch_;
    HoldSlot(to, slot);
    v1::DropSlotDataRequest drop;
    drop.set_first_slot(slot);
    drop.set_last_slot(slot);
    drop.set_epoch(epoch_);
    ASSERT_TRUE(from.inbox->DropSlotData(drop).ok());
  }

  void Open(LedgerShard& shard, const std::string& account, int64_t balance,
            const std::string& tenant = "acme") {
    ledger::v1::OpenAccountRequest request;
    request.set_id(account);
    request.set_initial_balance(balance);
    auto result =
        shard.core->OpenAccount(Sharded(Id("open-" + account, tenant), account), request);
    ASSERT_TRUE(result.ok());
    ASSERT_EQ(result->code(), 0) << result->message();
  }

  v1::CallResult Transfer(LedgerShard& shard, const std::string& command_id,
                          const std::string& from, const std::string& to, int64_t amount) {
    ledger::v1::TransferRequest request;
    request.set_from(from);
    request.set_to(to);
    request.set_amount(amount);
    auto result = shard.core->Transfer(Sharded(Id(command_id), from), request);
    EXPECT_TRUE(result.ok()) << result.status();
    return result.value_or(v1::CallResult());
  }

  // Delivers every pending follow-up of `from` to `to` (`times` times each, as a relay
  // that crashed before its acknowledgement would), then acknowledges them. With
  // `fresh_ids`, each delivery gets a new command id: the negative control.
  int Relay(LedgerShard& from, LedgerShard& to, int times = 1, bool fresh_ids = false) {
    auto pulled = from.inbox->PullFollowUps("acme", 100);
    EXPECT_TRUE(pulled.ok()) << pulled.status();
    v1::AckFollowUpsRequest ack;
    for (const v1::PendingFollowUp& pending : pulled->follow_ups()) {
      const v1::Command& command = pending.command();
      ledger::v1::CreditRequest credit;
      EXPECT_TRUE(credit.ParseFromString(command.request()));
      for (int i = 0; i < times; ++i) {
        CallIdentity id = Id(fresh_ids ? absl::StrCat(command.command_id(), "-", i)
                                       : command.command_id(),
                             command.tenant());
        id = Sharded(id, command.entity().id());
        auto result = to.core->Credit(id, credit);
        EXPECT_TRUE(result.ok() && result->code() == 0) << result.status();
      }
      ack.add_ids(pending.id());
    }
    EXPECT_TRUE(from.inbox->AckFollowUps("acme", ack).ok());
    return pulled->follow_ups_size();
  }

  // Money across both shards: what the accounts hold, what was minted, and what is on its
  // way: the credits waiting in the outboxes (counted from them), and what the ledgers'
  // own counters say (sent - received).
  struct Money {
    int64_t balances = 0, minted = 0, in_flight = 0, unclaimed = 0, in_outboxes = 0;
  };
  Money Count() {
    Money money;
    for (LedgerShard* shard : {&a_, &b_}) {
      auto total = shard->core->GetTotal();
      EXPECT_TRUE(total.ok());
      money.balances += total->total_balance();
      money.minted += total->total_minted();
      money.in_flight += total->credits_sent() - total->credits_received();
      money.unclaimed += total->unclaimed();
      auto pending = shard->inbox->PullFollowUps("acme", 1000);
      EXPECT_TRUE(pending.ok());
      for (const auto& follow_up : pending->follow_ups()) {
        ledger::v1::CreditRequest credit;
        EXPECT_TRUE(credit.ParseFromString(follow_up.command().request()));
        money.in_outboxes += credit.amount();
      }
    }
    return money;
  }
  // Nothing is made or lost: the accounts, the unclaimed and the credits still waiting
  // in an outbox add up to what was minted, and the counters agree on what is in flight.
  bool Conserved() {
    Money money = Count();
    return money.balances + money.in_outboxes + money.unclaimed == money.minted &&
           money.in_flight == money.in_outboxes;
  }
  void ExpectConserved() { EXPECT_TRUE(Conserved()); }

  int64_t Balance(LedgerShard& shard, const std::string& id) {
    auto account = shard.core->GetAccount("acme", id);
    return account.ok() ? account->balance() : -1;
  }

  uint64_t epoch_ = 1;
  ManualClock clock_;
  LedgerShard a_{clock_, "ledger-a"};
  LedgerShard b_{clock_, "ledger-b"};
};

TEST_F(LedgerShardsTest, ATransferToAnotherSlotIsADebitHereAndOneCreditThere) {
  v1::CallResult result = Transfer(a_, "t1", "alice", "bob", 30);
  ASSERT_EQ(result.code(), 0) << result.message();
  ledger::v1::TransferResponse response;
  ASSERT_TRUE(response.ParseFromString(result.response()));
  EXPECT_EQ(response.from_balance(), 70);
  EXPECT_EQ(response.credit_command_id(), Inbox::FollowUpCommandId("acme", "t1", 0));
  // In flight: not on either account yet, and counted.
  EXPECT_EQ(Count().in_flight, 30);
  ExpectConserved();
  // The same transfer again is the same debit (the inbox), and no second credit.
  EXPECT_EQ(Transfer(a_, "t1", "alice", "bob", 30).response(), result.response());
  EXPECT_EQ(a_.inbox->follow_ups_pending(), 1);

  // Relayed three times (a relay that died before acknowledging): credited once.
  EXPECT_EQ(Relay(a_, b_, /*times=*/3), 1);
  EXPECT_EQ(Balance(b_, "bob"), 80);
  EXPECT_EQ(Balance(a_, "alice"), 70);
  EXPECT_EQ(Count().in_flight, 0);
  EXPECT_EQ(Count().balances, 150);
  ExpectConserved();
}

TEST_F(LedgerShardsTest, ACrossShardTransferIsOneTrace) {
  constexpr char kTraceparent[] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  ledger::v1::TransferRequest request;
  request.set_from("alice");
  request.set_to("bob");
  request.set_amount(30);
  CallIdentity id = Sharded(Id("t1"), "alice");
  id.trace.set_traceparent(kTraceparent);
  auto result = a_.core->Transfer(id, request);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->code(), 0) << result->message();
  // The credit the debit owes carries the trace, under the span that applied the debit.
  auto pulled = a_.inbox->PullFollowUps("acme", 100);
  ASSERT_TRUE(pulled.ok()) << pulled.status();
  ASSERT_EQ(pulled->follow_ups_size(), 1);
  EXPECT_EQ(pulled->follow_ups(0).command().trace().traceparent(), kTraceparent);
  // So the debit's effect and (once relayed with it) the credit's share the trace id.
  auto effects = a_.inbox->ListEffects(0, 100, "acme");
  ASSERT_TRUE(effects.ok()) << effects.status();
  bool found = false;
  for (const v1::Effect& e : effects->effects()) {
    if (e.command_id() != "t1") continue;
    found = true;
    EXPECT_EQ(e.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
    EXPECT_EQ(e.span_id(), "00f067aa0ba902b7");
  }
  EXPECT_TRUE(found);
}

TEST_F(LedgerShardsTest, NegativeControlACreditResentUnderNewIdsBreaksConservation) {
  ASSERT_EQ(Transfer(a_, "t1", "alice", "bob", 30).code(), 0);
  Relay(a_, b_, /*times=*/2, /*fresh_ids=*/true);
  EXPECT_EQ(Balance(b_, "bob"), 110);
  EXPECT_FALSE(Conserved());
}

TEST_F(LedgerShardsTest, ACreditToNoAccountOfTheTenantBouncesBackAsARefund) {
  Open(b_, "mallory", 5, "globex");  // another tenant's account
  for (const char* to : {"nobody", "mallory"}) {
    std::string id = absl::StrCat("t-", to);
    ASSERT_EQ(Transfer(a_, id, "alice", to, 10).code(), 0);
    EXPECT_EQ(Relay(a_, b_), 1);
    ExpectConserved();
    EXPECT_EQ(Count().in_flight, 10);  // on its way back
    EXPECT_EQ(Relay(b_, a_), 1);       // the refund
    EXPECT_EQ(Balance(a_, "alice"), 100);
    EXPECT_EQ(Count().in_flight, 0);
    ExpectConserved();
  }
  EXPECT_EQ(b_.core->GetAccount("globex", "mallory")->balance(), 5);
  EXPECT_EQ(Count().unclaimed, 0);
}

TEST_F(LedgerShardsTest, ARefundWithNowhereToGoIsKeptAsUnclaimed) {
  ledger::v1::CreditRequest refund;
  refund.set_to("gone");
  refund.set_from("bob");
  refund.set_amount(7);
  refund.set_refund(true);
  auto result = a_.core->Credit(Id("r1"), refund);
  ASSERT_TRUE(result.ok());
  ledger::v1::CreditResponse response;
  ASSERT_TRUE(response.ParseFromString(result->response()));
  EXPECT_TRUE(response.bounced());
  EXPECT_EQ(a_.inbox->follow_ups_pending(), 0);  // no ping-pong
  EXPECT_EQ(Count().unclaimed, 7);
}

TEST_F(LedgerShardsTest, ATransferWithinOneSlotStaysOneAtomicBatch) {
  std::string neighbour;
  for (int i = 0; i < 100'000 && neighbour.empty(); ++i) {
    std::string id = absl::StrCat("n", i);
    if (SlotOf("acme", "account", id) == SlotOf("acme", "account", "alice")) neighbour = id;
  }
  ASSERT_FALSE(neighbour.empty());
  Open(a_, neighbour, 0);
  ASSERT_EQ(Transfer(a_, "t1", "alice", neighbour, 25).code(), 0);
  EXPECT_EQ(Balance(a_, neighbour), 25);
  EXPECT_EQ(a_.inbox->follow_ups_pending(), 0);
  EXPECT_EQ(Count().in_flight, 0);
}

TEST_F(LedgerShardsTest, ADebitIsRefusedWithoutFundsOrACommandId) {
  EXPECT_EQ(ReasonOf(Transfer(a_, "t1", "alice", "bob", 101)), "INSUFFICIENT_FUNDS");
  ledger::v1::TransferRequest request;
  request.set_from("alice");
  request.set_to("bob");
  request.set_amount(1);
  auto result = a_.core->Transfer(Id(""), request);
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(ReasonOf(*result), "COMMAND_ID_REQUIRED");
  EXPECT_EQ(Balance(a_, "alice"), 100);
  EXPECT_EQ(a_.inbox->follow_ups_pending(), 0);
}

// What a ledger keeps of its accounts in memory (AccountCache) follows its slots: an
// account that moved away is no longer read there, and one that came back is read as it
// left the other shard, not as it was before it went.
TEST_F(LedgerShardsTest, AnAccountThatMovedAwayAndBackIsNotReadFromMemory) {
  const uint32_t slot = SlotOf("acme", "account", "alice");
  ASSERT_EQ(Balance(a_, "alice"), 100);  // kept in a_'s memory since it was opened
  ASSERT_GT(a_.core->account_cache().size(), 0u);
  MoveSlot(a_, b_, slot);
  EXPECT_EQ(Balance(a_, "alice"), -1);
  // a handed the slot off: a write for it there is refused whatever its epoch's map.
  ledger::v1::TransferRequest stray;
  stray.set_from("alice");
  stray.set_to("bob");
  stray.set_amount(1);
  EXPECT_TRUE(IsSlotFenced(a_.core->Transfer(Sharded(Id("t0"), "alice"), stray).status()));

  ASSERT_EQ(Transfer(b_, "t1", "alice", "bob", 30).code(), 0);  // a debit there
  EXPECT_EQ(Balance(b_, "alice"), 70);
  MoveSlot(b_, a_, slot);
  EXPECT_EQ(Balance(b_, "alice"), -1);
  EXPECT_EQ(Balance(a_, "alice"), 70);
  EXPECT_EQ(ReasonOf(Transfer(a_, "t2", "alice", "bob", 80)), "INSUFFICIENT_FUNDS");
  ASSERT_EQ(Transfer(a_, "t3", "alice", "bob", 70).code(), 0);
  EXPECT_EQ(Balance(a_, "alice"), 0);
  EXPECT_EQ(Relay(b_, b_) + Relay(a_, b_), 2);
  EXPECT_EQ(Balance(b_, "bob"), 150);
  ExpectConserved();
}

// A credit admitted by the old owner's sidecar before its slot moved, arriving there after
// the drop: without the fence it would bounce (the account is gone) and refund the debit,
// and the same credit sent again to the new owner (whose inbox never saw it) would credit
// the account too. The fence refuses it with nothing applied; it lands once, there.
TEST_F(LedgerShardsTest, ALateCreditAtTheSlotsFormerOwnerIsRefusedAndCreatesNoMoney) {
  ASSERT_EQ(Transfer(a_, "t1", "alice", "bob", 30).code(), 0);
  auto pulled = a_.inbox->PullFollowUps("acme", 10);
  ASSERT_TRUE(pulled.ok());
  ASSERT_EQ(pulled->follow_ups_size(), 1);
  const v1::Command& command = pulled->follow_ups(0).command();
  ledger::v1::CreditRequest credit;
  ASSERT_TRUE(credit.ParseFromString(command.request()));
  // Admitted by b's sidecar under the map of now (epoch 1)...
  CallIdentity late = Sharded(Id(command.command_id()), "bob");
  // ... and bob's slot moves from b to a before it lands.
  MoveSlot(b_, a_, SlotOf("acme", "account", "bob"));
  auto bounced = b_.core->Credit(late, credit);
  EXPECT_TRUE(IsSlotFenced(bounced.status())) << bounced.status();
  EXPECT_EQ(b_.inbox->follow_ups_pending(), 0);  // no refund emitted

  // Sent again (the relay had no answer), to the slot's owner now: credited once.
  for (int i = 0; i < 2; ++i) {
    auto landed = a_.core->Credit(Sharded(Id(command.command_id()), "bob"), credit);
    ASSERT_TRUE(landed.ok()) << landed.status();
    EXPECT_EQ(landed->code(), 0);
  }
  v1::AckFollowUpsRequest ack;
  ack.add_ids(pulled->follow_ups(0).id());
  ASSERT_TRUE(a_.inbox->AckFollowUps("acme", ack).ok());
  EXPECT_EQ(Balance(a_, "bob"), 80);
  EXPECT_EQ(Balance(a_, "alice"), 70);
  EXPECT_EQ(a_.inbox->follow_ups_pending() + b_.inbox->follow_ups_pending(), 0);
  ExpectConserved();
}

// Two tenants' accounts of one id are two rows under two keys: a slot move onto a shard
// where another tenant holds an account of the same id goes through (it was ROW_CONFLICT
// when the key was the id alone).
TEST_F(LedgerShardsTest, AMoveOntoAShardWhereAnotherTenantHasTheSameAccountIdGoesThrough) {
  Open(b_, "alice", 5, "globex");
  ASSERT_NE(SlotOf("acme", "account", "alice"), SlotOf("globex", "account", "alice"));
  MoveSlot(a_, b_, SlotOf("acme", "account", "alice"));
  EXPECT_EQ(Balance(b_, "alice"), 100);
  EXPECT_EQ(b_.core->GetAccount("globex", "alice")->balance(), 5);
  ExpectConserved();
}

// Each slot's counters move with its accounts, and a total counts each slot once while
// two shards hold a copy of it (from the import to the drop): the old owner handed it off
// at the export.
TEST_F(LedgerShardsTest, TheBooksCountEachSlotOnceWhileItMoves) {
  const uint32_t slot = SlotOf("acme", "account", "alice");
  ASSERT_EQ(Transfer(a_, "t1", "alice", "bob", 30).code(), 0);  // sent: alice's slot's
  ++epoch_;
  v1::ExportSlotDataRequest out;
  out.set_first_slot(slot);
  out.set_last_slot(slot);
  out.set_epoch(epoch_);
  auto exported = a_.inbox->ExportSlotData(out);
  ASSERT_TRUE(exported.ok()) << exported.status();
  v1::ImportSlotDataRequest in;
  in.set_first_slot(slot);
  in.set_last_slot(slot);
  in.set_epoch(epoch_);
  *in.mutable_rows() = exported->rows();
  ASSERT_TRUE(b_.inbox->ImportSlotData(in).ok());
  // Both hold alice's slot now; neither counts it until the flip gives it to b (an abort
  // could still leave b's copy behind).
  EXPECT_EQ(Count().balances, 50);
  ++epoch_;
  HoldSlot(b_, slot);
  // Only b counts it.
  EXPECT_EQ(Count().balances, 120);
  EXPECT_EQ(Count().minted, 150);
  ExpectConserved();
  EXPECT_EQ(a_.core->GetTotal()->accounts(), 0);
  // Asked for the slots a map gives each shard, the same.
  ledger::v1::GetTotalRequest alices;
  alices.add_slots(slot);
  EXPECT_EQ(b_.core->GetTotal(alices)->total_balance(), 70);
  EXPECT_EQ(b_.core->GetTotal(alices)->credits_sent(), 30);
  alices.add_slots(kSlotCount);
  EXPECT_EQ(b_.core->GetTotal(alices).status().code(), absl::StatusCode::kInvalidArgument);

  v1::DropSlotDataRequest drop;
  drop.set_first_slot(slot);
  drop.set_last_slot(slot);
  drop.set_epoch(epoch_);
  ASSERT_TRUE(a_.inbox->DropSlotData(drop).ok());
  // Nothing of alice's slot is left on a, its counters included.
  ledger::v1::GetTotalRequest all_of_a;
  for (uint32_t s = 0; s < kSlotCount; ++s) all_of_a.add_slots(s);
  auto left = a_.core->GetTotal(all_of_a);
  ASSERT_TRUE(left.ok());
  EXPECT_EQ(left->total_minted(), 0);
  EXPECT_EQ(left->credits_sent(), 0);
  EXPECT_EQ(b_.core->GetTotal()->total_minted(), 150);
  // The credit alice's debit owes moved with her slot: b's relay sends it now.
  EXPECT_EQ(Relay(a_, b_), 0);
  EXPECT_EQ(Relay(b_, b_), 1);
  EXPECT_EQ(Balance(b_, "bob"), 80);
  ExpectConserved();
}

// A move aborted after its copy: the run is the exporter's again. Once its sidecar holds the
// abort's map, a's business counts the run and relays its pending credit again; b's
// partial copy (its sidecar was down at the abort, so nothing dropped it) is neither
// counted nor relayed, so the books add up and the credit lands once.
TEST_F(LedgerShardsTest, AnAbortAfterTheCopyGivesTheRunBackAndTheLeftCopyIsNotCounted) {
  const uint32_t slot = SlotOf("acme", "account", "alice");
  ASSERT_EQ(Transfer(a_, "t1", "alice", "bob", 30).code(), 0);
  CopySlot(a_, b_, slot);
  ++epoch_;  // the abort's map: alice's slot a's, not migrating
  HoldSlot(a_, slot);
  // Nobody counted or relayed twice: a holds the run, b's copy is left out.
  EXPECT_EQ(Count().balances, 120);
  EXPECT_EQ(Count().minted, 150);
  EXPECT_EQ(Count().in_outboxes, 30);
  ExpectConserved();
  EXPECT_EQ(b_.inbox->PullFollowUps("acme", 10)->follow_ups_size(), 0);
  ledger::v1::GetTotalRequest alices;
  alices.add_slots(slot);
  EXPECT_EQ(a_.core->GetTotal(alices)->total_balance(), 70);
  // a's relay sends the pending credit, before any write to the run lands at the abort's
  // epoch.
  EXPECT_EQ(Relay(b_, b_), 0);
  EXPECT_EQ(Relay(a_, b_), 1);
  EXPECT_EQ(Balance(b_, "bob"), 80);
  ExpectConserved();
  // a writes the run again; b's copy stays out of the books.
  ASSERT_EQ(Transfer(a_, "t2", "alice", "bob", 10).code(), 0);
  EXPECT_EQ(Relay(a_, b_), 1);
  EXPECT_EQ(Relay(b_, b_), 0);
  EXPECT_EQ(Balance(a_, "alice"), 60);
  EXPECT_EQ(Balance(b_, "bob"), 90);
  EXPECT_EQ(Count().balances, 150);
  ExpectConserved();
}

}  // namespace
}  // namespace eonce
