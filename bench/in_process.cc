#include "bench/in_process.h"

#include <filesystem>
#include <memory>

#include "absl/strings/str_cat.h"
#include "bench/commands.h"
#include "common/base/clock.h"
#include "common/command/command.h"
#include "common/store/rocks.h"
#include "dedupe_sidecar/doors/sidecar_service.h"
#include "eonce/v1/sidecar.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "services/inbox/inbox_upstream.h"
#include "services/ledger/ledger.h"
#include "services/ledger/ledger_in_process.h"

namespace eonce::bench {

absl::Status BenchInProcess(const MeasureOptions& measure, const std::vector<int>& points,
                            const std::vector<int>& batched_points, const std::string& dir,
                            int accounts, const std::function<LimitRunFn(int)>& limit,
                            const std::function<LimitRunFn(int)>& reference,
                            std::vector<std::pair<int, Figures>>* out,
                            std::vector<std::pair<int, Figures>>* batched) {
  std::error_code ignored;
  std::filesystem::create_directories(dir, ignored);
  Clock& clock = RealClock::Get();
  auto families = LedgerCore::ColumnFamilies();
  for (auto& f : Inbox::ColumnFamilies(clock)) families.push_back(f);
  auto store = RocksStore::Open(dir + "/ledger", families, Inbox::StoreOptionsFor());
  if (!store.ok()) return store.status();
  Inbox inbox(**store, clock, /*legacy_mode=*/false);
  LedgerCore core(**store, inbox);
  for (int a = 0; a < accounts; ++a) {
    CallIdentity id;
    id.command_id = absl::StrCat("open-", a);
    id.tenant = "bench";
    ledger::v1::OpenAccountRequest open;
    open.set_id(absl::StrCat("a", a));
    open.set_initial_balance(LedgerCore::kMaxAmount);
    if (absl::StatusOr<v1::CallResult> opened = core.OpenAccount(id, open); !opened.ok()) {
      return opened.status();
    }
  }
  InboxUpstream upstream(inbox, LedgerHandlers(core), clock);
  SidecarServerOptions options;
  options.data_dir = dir + "/sidecar";
  options.upstream = &upstream;
  auto sidecar = SidecarServer::Start(options, clock);
  if (!sidecar.ok()) return sidecar.status();
  auto stub = v1::Sidecar::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", (*sidecar)->port()), grpc::InsecureChannelCredentials()));
  for (int n : points) {
    Figures f = MeasurePaired(measure, n, [&, n](int64_t i, std::function<void(bool)> done) {
      SubmitAsync(*stub, TransferCommand(absl::StrCat("inproc-", n, "-", i), accounts, i),
                  v1::APPLIED, std::move(done));
    }, limit(n), nullptr, reference(n));
    out->emplace_back(n, f);
  }
  for (int n : batched_points) {
    BatchedSubmitter submitter(*stub);
    Figures f = MeasurePaired(measure, n, [&, n](int64_t i, std::function<void(bool)> done) {
      submitter.Submit(TransferCommand(absl::StrCat("inproc-batch-", n, "-", i), accounts, i),
                       v1::APPLIED, std::move(done));
    }, limit(n), nullptr, reference(n));
    batched->emplace_back(n, f);
  }
  return (*sidecar)->Shutdown(1000);
}

}  // namespace eonce::bench
