// The ledger's gRPC adapter, and LedgerServer: the ledger on a ServiceHost (store, inbox,
// Outcome and Effects services). In legacy mode the Outcome service is not registered, so
// the sidecar sees UNIMPLEMENTED and parks unknown outcomes instead of guessing.
#ifndef EONCE_SERVICES_LEDGER_LEDGER_SERVICE_H_
#define EONCE_SERVICES_LEDGER_LEDGER_SERVICE_H_

#include <memory>

#include "absl/status/statusor.h"
#include "common/base/clock.h"
#include "eonce/ledger/v1/ledger.grpc.pb.h"
#include "services/inbox/service_host.h"
#include "services/ledger/ledger.h"

namespace eonce {

class LedgerServiceImpl : public ledger::v1::Ledger::CallbackService {
 public:
  LedgerServiceImpl(std::unique_ptr<LedgerCore> core, Inbox& inbox)
      : core_(std::move(core)), inbox_(inbox) {}

  grpc::ServerUnaryReactor* OpenAccount(grpc::CallbackServerContext* context,
                                        const ledger::v1::OpenAccountRequest* request,
                                        ledger::v1::Account* response) override;
  grpc::ServerUnaryReactor* Transfer(grpc::CallbackServerContext* context,
                                     const ledger::v1::TransferRequest* request,
                                     ledger::v1::TransferResponse* response) override;
  grpc::ServerUnaryReactor* Credit(grpc::CallbackServerContext* context,
                                   const ledger::v1::CreditRequest* request,
                                   ledger::v1::CreditResponse* response) override;
  grpc::ServerUnaryReactor* GetAccount(grpc::CallbackServerContext* context,
                                       const ledger::v1::GetAccountRequest* request,
                                       ledger::v1::Account* response) override;
  grpc::ServerUnaryReactor* GetTotal(grpc::CallbackServerContext* context,
                                     const ledger::v1::GetTotalRequest* request,
                                     ledger::v1::GetTotalResponse* response) override;

  LedgerCore& core() { return *core_; }

 private:
  std::unique_ptr<LedgerCore> core_;
  Inbox& inbox_;
};

// The ServiceHost setup that makes a host a ledger. `options` is read when the host
// starts (after the flags are parsed); `core`, if set, receives the ledger's core (for an
// embedded sidecar's handlers).
ServiceHost::Setup LedgerSetup(std::function<LedgerOptions()> options = nullptr,
                               LedgerCore** core = nullptr);

struct LedgerServerOptions : ServiceHostOptions {
  LedgerOptions ledger;
};

// A running ledger for tests and tools.
class LedgerServer {
 public:
  static absl::StatusOr<std::unique_ptr<LedgerServer>> Start(const LedgerServerOptions& options,
                                                            Clock& clock);
  int port() const { return host_->port(); }
  int metrics_port() const { return host_->metrics_port(); }
  LedgerCore& core() { return *core_; }
  absl::Status Shutdown(int64_t drain_ms) { return host_->Shutdown(drain_ms); }

 private:
  std::unique_ptr<ServiceHost> host_;
  LedgerCore* core_ = nullptr;
};

}  // namespace eonce

#endif  // EONCE_SERVICES_LEDGER_LEDGER_SERVICE_H_
