// ledger_service: the reference ledger behind a dedupe sidecar.
#include "services/inbox/service_host.h"
#include "services/ledger/ledger_service.h"

int main(int argc, char** argv) {
  return eonce::RunServiceMain(argc, argv, "ledger_service", "127.0.0.1:7101",
                               eonce::LedgerCore::ColumnFamilies(), eonce::LedgerSetup());
}
