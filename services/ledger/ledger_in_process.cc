#include "services/ledger/ledger_in_process.h"

#include "eonce/ledger/v1/ledger.pb.h"

namespace eonce {
namespace {

// A handler that parses `Request` and calls `mutate` with it; a request that does not
// parse is a terminal INVALID_ARGUMENT, as gRPC's own deserialization would answer.
template <typename Request, typename Mutate>
InboxUpstream::Handler Parsing(Mutate mutate) {
  return [mutate](const CallIdentity& identity,
                  const std::string& bytes) -> absl::StatusOr<v1::CallResult> {
    Request request;
    if (!request.ParseFromString(bytes)) {
      return RejectionResult(absl::StatusCode::kInvalidArgument, "INVALID_REQUEST",
                             "the request does not parse");
    }
    return mutate(identity, request);
  };
}

}  // namespace

std::map<std::string, InboxUpstream::Handler> LedgerHandlers(LedgerCore& core) {
  return {
      {"/eonce.ledger.v1.Ledger/OpenAccount",
       Parsing<ledger::v1::OpenAccountRequest>(
           [&core](const CallIdentity& id, const ledger::v1::OpenAccountRequest& r) {
             return core.OpenAccount(id, r);
           })},
      {"/eonce.ledger.v1.Ledger/Transfer",
       Parsing<ledger::v1::TransferRequest>(
           [&core](const CallIdentity& id, const ledger::v1::TransferRequest& r) {
             return core.Transfer(id, r);
           })},
      {"/eonce.ledger.v1.Ledger/Credit",
       Parsing<ledger::v1::CreditRequest>(
           [&core](const CallIdentity& id, const ledger::v1::CreditRequest& r) {
             return core.Credit(id, r);
           })},
  };
}

}  // namespace eonce
