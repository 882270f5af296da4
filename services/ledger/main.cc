// ledger_service: the reference ledger behind a dedupe sidecar.
#include "absl/flags/flag.h"
#include "services/inbox/service_host.h"
#include "services/ledger/ledger_service.h"

ABSL_FLAG(bool, cross_slot_credits, false,
          "sharded: a transfer to an account of another slot debits here and sends a Credit "
          "through the outbox (a relay must run: outbox_agent --relay_from)");

int main(int argc, char** argv) {
  return eonce::RunServiceMain(argc, argv, "ledger_service", "127.0.0.1:7101",
                               eonce::LedgerCore::ColumnFamilies(), eonce::LedgerSetup([] {
                                 eonce::LedgerOptions options;
                                 options.cross_slot_credits =
                                     absl::GetFlag(FLAGS_cross_slot_credits);
                                 return options;
                               }));
}
