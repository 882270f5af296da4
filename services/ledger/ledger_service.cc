#include "services/ledger/ledger_service.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/server.h"
#include "grpcpp/server_builder.h"

namespace eonce {

grpc::ServerUnaryReactor* LedgerServiceImpl::OpenAccount(
    grpc::CallbackServerContext* context, const ledger::v1::OpenAccountRequest* request,
    ledger::v1::Account* response) {
  return FinishMutation(context, core_.OpenAccount(IdentityFromMetadata(*context), *request),
                        response);
}

grpc::ServerUnaryReactor* LedgerServiceImpl::Transfer(
    grpc::CallbackServerContext* context, const ledger::v1::TransferRequest* request,
    ledger::v1::TransferResponse* response) {
  return FinishMutation(context, core_.Transfer(IdentityFromMetadata(*context), *request),
                        response);
}

grpc::ServerUnaryReactor* LedgerServiceImpl::GetAccount(
    grpc::CallbackServerContext* context, const ledger::v1::GetAccountRequest* request,
    ledger::v1::Account* response) {
  return FinishRead(context, core_.GetAccount(request->id()), response);
}

grpc::ServerUnaryReactor* LedgerServiceImpl::GetTotal(
    grpc::CallbackServerContext* context, const ledger::v1::GetTotalRequest* /*request*/,
    ledger::v1::GetTotalResponse* response) {
  return FinishRead(context, core_.GetTotal(), response);
}

absl::StatusOr<std::unique_ptr<LedgerServer>> LedgerServer::Start(
    const LedgerServerOptions& options, Clock& clock) {
  if (options.data_dir.empty()) return absl::InvalidArgumentError("data_dir: required");
  std::unique_ptr<LedgerServer> server(new LedgerServer());
  auto store = RocksStore::Open(options.data_dir, LedgerCore::ColumnFamilies(), StoreOptions());
  if (!store.ok()) return store.status();
  server->store_ = std::move(*store);
  server->inbox_ =
      std::make_unique<Inbox>(*server->store_, clock, options.legacy_mode, options.faults);
  server->core_ = std::make_unique<LedgerCore>(*server->store_, *server->inbox_);
  server->ledger_service_ = std::make_unique<LedgerServiceImpl>(*server->core_);
  server->effects_service_ = std::make_unique<EffectsServiceImpl>(*server->inbox_);

  EnableStandardServices();
  grpc::ServerBuilder builder;
  absl::Status listen = AddListener(builder, options.listen_address, &server->port_);
  if (!listen.ok()) return listen;
  ApplyServerLimits(builder, 4 << 20, 1024);
  builder.RegisterService(server->ledger_service_.get());
  builder.RegisterService(server->effects_service_.get());
  if (!options.legacy_mode) {
    server->outcome_service_ = std::make_unique<OutcomeServiceImpl>(*server->inbox_);
    builder.RegisterService(server->outcome_service_.get());
  }
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("listen: cannot bind ", options.listen_address));
  }
  return server;
}

absl::Status LedgerServer::Shutdown(int64_t drain_ms) {
  if (server_ != nullptr) {
    SetServing(*server_, false);
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(drain_ms));
    server_->Wait();
    server_.reset();
  }
  return store_ != nullptr ? store_->Close() : absl::OkStatus();
}

LedgerServer::~LedgerServer() { Shutdown(0).IgnoreError(); }

}  // namespace eonce
