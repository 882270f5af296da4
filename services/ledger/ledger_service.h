// The ledger's gRPC adapter, and the server that bundles it with the Outcome and Effects
// services. In legacy mode the Outcome service is not registered, so the sidecar sees
// UNIMPLEMENTED and parks unknown outcomes instead of guessing.
#ifndef EONCE_SERVICES_LEDGER_LEDGER_SERVICE_H_
#define EONCE_SERVICES_LEDGER_LEDGER_SERVICE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/clock.h"
#include "common/fault.h"
#include "eonce/ledger/v1/ledger.grpc.pb.h"
#include "grpcpp/server.h"
#include "services/inbox/inbox_services.h"
#include "services/ledger/ledger.h"

namespace eonce {

class LedgerServiceImpl : public ledger::v1::Ledger::CallbackService {
 public:
  explicit LedgerServiceImpl(LedgerCore& core) : core_(core) {}

  grpc::ServerUnaryReactor* OpenAccount(grpc::CallbackServerContext* context,
                                        const ledger::v1::OpenAccountRequest* request,
                                        ledger::v1::Account* response) override;
  grpc::ServerUnaryReactor* Transfer(grpc::CallbackServerContext* context,
                                     const ledger::v1::TransferRequest* request,
                                     ledger::v1::TransferResponse* response) override;
  grpc::ServerUnaryReactor* GetAccount(grpc::CallbackServerContext* context,
                                       const ledger::v1::GetAccountRequest* request,
                                       ledger::v1::Account* response) override;
  grpc::ServerUnaryReactor* GetTotal(grpc::CallbackServerContext* context,
                                     const ledger::v1::GetTotalRequest* request,
                                     ledger::v1::GetTotalResponse* response) override;

 private:
  LedgerCore& core_;
};

struct LedgerServerOptions {
  std::string listen_address = "127.0.0.1:0";
  std::string data_dir;
  bool legacy_mode = false;
  FaultInjector* faults = nullptr;
};

// A running ledger server: store, inbox, core and gRPC server, torn down in order.
class LedgerServer {
 public:
  static absl::StatusOr<std::unique_ptr<LedgerServer>> Start(const LedgerServerOptions& options,
                                                            Clock& clock);
  ~LedgerServer();

  int port() const { return port_; }
  grpc::Server& server() { return *server_; }
  LedgerCore& core() { return *core_; }
  // Stops the server (in-flight calls finish within `drain_ms`) and closes the store.
  absl::Status Shutdown(int64_t drain_ms);

 private:
  LedgerServer() = default;
  std::unique_ptr<RocksStore> store_;
  std::unique_ptr<Inbox> inbox_;
  std::unique_ptr<LedgerCore> core_;
  std::unique_ptr<LedgerServiceImpl> ledger_service_;
  std::unique_ptr<OutcomeServiceImpl> outcome_service_;
  std::unique_ptr<EffectsServiceImpl> effects_service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace eonce

#endif  // EONCE_SERVICES_LEDGER_LEDGER_SERVICE_H_
