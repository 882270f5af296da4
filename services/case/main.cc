// case_service: the reference case-management service behind a dedupe sidecar.
#include "services/case/case_service.h"

int main(int argc, char** argv) {
  return eonce::RunServiceMain(argc, argv, "case_service", "127.0.0.1:7201",
                               eonce::CaseCore::ColumnFamilies(), eonce::CaseSetup());
}
