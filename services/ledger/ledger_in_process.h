// The reference ledger's methods for a sidecar in the ledger's own process
// (services/inbox/inbox_upstream.h): each parses its request and runs the LedgerCore
// mutation, as the gRPC service does.
#ifndef EONCE_SERVICES_LEDGER_LEDGER_IN_PROCESS_H_
#define EONCE_SERVICES_LEDGER_LEDGER_IN_PROCESS_H_

#include <map>
#include <string>

#include "services/inbox/inbox_upstream.h"
#include "services/ledger/ledger.h"

namespace eonce {

// `core` must outlive the handlers.
std::map<std::string, InboxUpstream::Handler> LedgerHandlers(LedgerCore& core);

}  // namespace eonce

#endif  // EONCE_SERVICES_LEDGER_LEDGER_IN_PROCESS_H_
