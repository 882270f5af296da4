#include "services/ledger/ledger_service.h"

#include "absl/strings/str_cat.h"
#include "common/base/log.h"
#include "common/base/status.h"
#include "services/inbox/inbox_services.h"
#include "services/ledger/ledger_in_process.h"

namespace eonce {

grpc::ServerUnaryReactor* LedgerServiceImpl::OpenAccount(
    grpc::CallbackServerContext* context, const ledger::v1::OpenAccountRequest* request,
    ledger::v1::Account* response) {
  return RunMutation(
      context, inbox_,
      [this, request](const CallIdentity& id) { return core_->OpenAccount(id, *request); },
      response);
}

grpc::ServerUnaryReactor* LedgerServiceImpl::Transfer(
    grpc::CallbackServerContext* context, const ledger::v1::TransferRequest* request,
    ledger::v1::TransferResponse* response) {
  return RunMutation(
      context, inbox_,
      [this, request](const CallIdentity& id) { return core_->Transfer(id, *request); },
      response);
}

grpc::ServerUnaryReactor* LedgerServiceImpl::Credit(
    grpc::CallbackServerContext* context, const ledger::v1::CreditRequest* request,
    ledger::v1::CreditResponse* response) {
  return RunMutation(
      context, inbox_,
      [this, request](const CallIdentity& id) { return core_->Credit(id, *request); }, response);
}

grpc::ServerUnaryReactor* LedgerServiceImpl::GetAccount(
    grpc::CallbackServerContext* context, const ledger::v1::GetAccountRequest* request,
    ledger::v1::Account* response) {
  return FinishUnary(context,
                     core_->GetAccount(IdentityFromMetadata(*context).tenant, request->id()),
                     response);
}

grpc::ServerUnaryReactor* LedgerServiceImpl::GetTotal(
    grpc::CallbackServerContext* context, const ledger::v1::GetTotalRequest* request,
    ledger::v1::GetTotalResponse* response) {
  return FinishUnary(context, core_->GetTotal(*request), response);
}

namespace {

// The ledger's core, with the tenants of accounts opened before they were kept adopted,
// and every account filed under its slot.
absl::StatusOr<std::unique_ptr<LedgerCore>> NewLedgerCore(RocksStore& store, Inbox& inbox,
                                                          const LedgerOptions& options) {
  if (options.account_cache_entries > AccountCache::kMaxEntries) {
    return absl::InvalidArgumentError(
        absl::StrCat("account_cache_entries: must be at most ", AccountCache::kMaxEntries));
  }
  auto core = std::make_unique<LedgerCore>(store, inbox, options);
  absl::StatusOr<int64_t> migrated = core->MigrateAccountKeys();
  if (!migrated.ok()) return migrated.status();
  if (*migrated > 0) {
    LogInfo("accounts keyed by tenant and id", {{"accounts", absl::StrCat(*migrated)}});
  }
  absl::StatusOr<int64_t> adopted = core->AdoptTenantsFromEffects();
  if (!adopted.ok()) return adopted.status();
  if (*adopted > 0) {
    LogInfo("accounts given the tenant that opened them", {{"accounts", absl::StrCat(*adopted)}});
  }
  EONCE_RETURN_IF_ERROR(core->FileAccounts());
  return core;
}

}  // namespace

ServiceHost::Setup LedgerSetup(std::function<LedgerOptions()> options, LedgerCore** core_out) {
  return [options, core_out](RocksStore& store, Inbox& inbox) -> absl::StatusOr<HostedService> {
    EONCE_ASSIGN_OR_RETURN(std::unique_ptr<LedgerCore> core,
                           NewLedgerCore(store, inbox, options ? options() : LedgerOptions{}));
    auto service = std::make_shared<LedgerServiceImpl>(std::move(core), inbox);
    if (core_out != nullptr) *core_out = &service->core();
    // The same methods in process, so that a sidecar may batch its forwards.
    HostedService hosted{service, LedgerHandlers(service->core())};
    hosted.collect = [service](const std::string& prefix) {
      const AccountCache& cache = service->core().account_cache();
      return std::vector<prometheus::MetricFamily>{
          CounterFamily(prefix + "account_cache_lookups_total",
                        "Account reads answered from memory (hit) or from the store (miss).",
                        {{{{"result", "hit"}}, static_cast<double>(cache.hits())},
                         {{{"result", "miss"}}, static_cast<double>(cache.misses())}}),
          GaugeFamily(prefix + "account_cache_entries", "Accounts kept in memory.",
                      {{{}, static_cast<double>(cache.size())}})};
    };
    return hosted;
  };
}

absl::StatusOr<std::unique_ptr<LedgerServer>> LedgerServer::Start(
    const LedgerServerOptions& options, Clock& clock) {
  std::unique_ptr<LedgerServer> server(new LedgerServer());
  auto host = ServiceHost::Start(options, clock, LedgerCore::ColumnFamilies(),
                                 LedgerSetup([ledger = options.ledger] { return ledger; },
                                             &server->core_));
  if (!host.ok()) return host.status();
  server->host_ = std::move(*host);
  return server;
}

}  // namespace eonce
