// The sharded ledger's two halves of a transfer between slots: the debit, which emits the
// credit as a follow-up, and the credit (or its bounce). See ledger.h.
#include "absl/strings/str_cat.h"
#include "common/coord/slots.h"
#include "common/base/status.h"
#include "services/ledger/ledger.h"
#include "services/ledger/ledger_internal.h"

namespace eonce {

using ledger_internal::AccountEffect;
using ledger_internal::AccountEntity;
using ledger_internal::BadAccountId;
using ledger_internal::BadAmount;
using ledger_internal::CounterKey;
using ledger_internal::kCreditMethod;
using ledger_internal::kReceived;
using ledger_internal::kSent;
using ledger_internal::kUnclaimed;
using ledger_internal::Reject;

absl::StatusOr<v1::CallResult> LedgerCore::Debit(const CallIdentity& identity,
                                                 const ledger::v1::TransferRequest& request) {
  std::string from_entity = AccountEntity(request.from());
  // The debit's counter is its account's slot's, so that it moves with the account.
  const uint32_t slot = SlotOf(identity.tenant, "account", request.from());
  const std::string sent = CounterKey(kSent, slot);
  return inbox_.Run(identity, {from_entity, sent},
                    [&](rocksdb::WriteBatch* batch, uint64_t seq) -> absl::StatusOr<Applied> {
    if (auto bad = BadAmount(request.amount())) return *bad;
    if (auto bad = BadAccountId(request.to(), "to")) return *bad;
    if (identity.command_id.empty()) {
      // The credit's id is derived from the debit's: without one it could not be resent
      // as the same command.
      return Reject(absl::StatusCode::kFailedPrecondition, "COMMAND_ID_REQUIRED",
                    "a transfer to another slot needs a command id (send it through eonce)");
    }
    EONCE_ASSIGN_OR_RETURN(auto from, ReadAccount(identity.tenant, request.from()));
    if (!from.has_value()) {
      return Reject(absl::StatusCode::kNotFound, "NO_SUCH_ACCOUNT",
                    absl::StrCat("no account ", request.from()));
    }
    if (from->balance() < request.amount()) {
      return Reject(absl::StatusCode::kFailedPrecondition, "INSUFFICIENT_FUNDS",
                    absl::StrCat("account ", request.from(), " holds ", from->balance(),
                                 ", needs ", request.amount()));
    }
    from->set_balance(from->balance() - request.amount());
    from->set_revision(from->revision() + 1);
    PutAccount(batch, *from);
    EONCE_RETURN_IF_ERROR(AddToCounter(batch, kSent, slot, request.amount()));

    ledger::v1::CreditRequest credit;
    credit.set_to(request.to());
    credit.set_amount(request.amount());
    credit.set_from(request.from());
    credit.set_transfer_command_id(identity.command_id);
    Applied applied;
    applied.on_written = accounts_.KeepWhenWritten({*from});
    applied.follow_ups.push_back(
        FollowUp{kCreditMethod, credit.SerializeAsString(), "account", request.to()});
    ledger::v1::TransferResponse response;
    response.set_from_balance(from->balance());
    response.set_effect_seq(seq);
    response.set_credit_command_id(
        Inbox::FollowUpCommandId(identity.tenant, identity.command_id, 0));
    applied.result.set_response(response.SerializeAsString());
    applied.effect = AccountEffect(from_entity, "/eonce.ledger.v1.Ledger/Transfer",
                                   request.amount(), from->revision());
    return applied;
  });
}

absl::StatusOr<v1::CallResult> LedgerCore::Credit(const CallIdentity& identity,
                                                  const ledger::v1::CreditRequest& request) {
  std::string to_entity = AccountEntity(request.to());
  // Every counter a credit moves is its account's slot's, bounced or not.
  const uint32_t slot = SlotOf(identity.tenant, "account", request.to());
  const std::string received = CounterKey(kReceived, slot);
  const std::string sent = CounterKey(kSent, slot);
  const std::string unclaimed = CounterKey(kUnclaimed, slot);
  return inbox_.Run(identity, {to_entity, received, sent, unclaimed},
                    [&](rocksdb::WriteBatch* batch, uint64_t seq) -> absl::StatusOr<Applied> {
    if (auto bad = BadAmount(request.amount())) return *bad;
    if (auto bad = BadAccountId(request.from(), "from")) return *bad;
    EONCE_ASSIGN_OR_RETURN(auto to, ReadAccount(identity.tenant, request.to()));
    EONCE_RETURN_IF_ERROR(AddToCounter(batch, kReceived, slot, request.amount()));
    Applied applied;
    ledger::v1::CreditResponse response;
    response.set_effect_seq(seq);
    if (to.has_value()) {
      to->set_balance(to->balance() + request.amount());
      to->set_revision(to->revision() + 1);
      PutAccount(batch, *to);
      applied.on_written = accounts_.KeepWhenWritten({*to});
      response.set_to_balance(to->balance());
    } else if (!request.refund() && !identity.command_id.empty()) {
      // Bounced: the amount goes back to where it came from, as a refund.
      response.set_bounced(true);
      EONCE_RETURN_IF_ERROR(AddToCounter(batch, kSent, slot, request.amount()));
      ledger::v1::CreditRequest refund;
      refund.set_to(request.from());
      refund.set_amount(request.amount());
      refund.set_from(request.to());
      refund.set_transfer_command_id(request.transfer_command_id());
      refund.set_refund(true);
      applied.follow_ups.push_back(
          FollowUp{kCreditMethod, refund.SerializeAsString(), "account", request.from()});
    } else {
      // A refund with nowhere to go (or a credit with no command id to derive one from)
      // is kept, counted, for an operator.
      response.set_bounced(true);
      EONCE_RETURN_IF_ERROR(AddToCounter(batch, kUnclaimed, slot, request.amount()));
    }
    applied.result.set_response(response.SerializeAsString());
    applied.effect = AccountEffect(to_entity, kCreditMethod, request.amount(),
                                   to.has_value() ? to->revision() : 0);
    return applied;
  });
}

}  // namespace eonce
