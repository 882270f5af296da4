#include "bench/large.h"

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/commands.h"
#include "common/base/clock.h"
#include "common/store/rocks.h"
#include "common/base/status.h"
#include "dedupe_sidecar/authz/audit_log.h"
#include "dedupe_sidecar/store/record_store.h"
#include "eonce/ledger/v1/ledger.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "tests/util/process.h"

namespace eonce::bench {
namespace {

int64_t RssKb(pid_t pid) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) {
      int64_t kb = 0;
      std::sscanf(line.c_str(), "VmRSS: %ld", &kb);
      return kb;
    }
  }
  return -1;
}

// The actor the stored commands were sent for; the duplicates are its retries, which the
// sidecar counts without an audit event (another actor's would be audited).
constexpr char kActor[] = "bench-agent";

// The command a record of the store answers, as a duplicate would send it again.
v1::Command StoredCommand(int64_t i, int accounts) {
  v1::Command c = TransferCommand(absl::StrCat("m", i), accounts, i);
  c.set_actor(kActor);
  return c;
}

// Writes `records` committed records, as the sidecar would have after answering them,
// and compacts the store. Returns the bytes of key + payload hash + response.
absl::StatusOr<int64_t> Populate(const std::string& dir, int64_t records, int accounts) {
  ManualClock clock(RealClock::Get().NowMs());
  RecordStoreFilters filters(clock);
  auto families = RecordStore::ColumnFamilies(filters);
  for (auto& f : AuditLog::ColumnFamilies(filters)) families.push_back(f);
  EONCE_ASSIGN_OR_RETURN(auto rocks, RocksStore::Open(dir, families, StoreOptions()));
  RecordStore store(*rocks, clock, RetentionOptions());
  int64_t raw_bytes = 0;
  for (int64_t i = 0; i < records; ++i) {
    v1::Command c = StoredCommand(i, accounts);
    Record r;
    r.set_state(Record::COMMITTED);
    r.set_tenant("bench");
    r.set_idempotency_key(c.idempotency_key());
    r.set_command_id(c.command_id());
    r.set_actor(c.actor());
    r.set_operation(c.target_method());
    r.set_payload_hash(c.payload_hash().sha256());
    r.set_fencing_token(1);
    ledger::v1::TransferResponse response;
    response.set_from_balance(1'000'000 + i);
    response.set_to_balance(2'000'000 + i);
    response.set_effect_seq(static_cast<uint64_t>(i));
    r.mutable_result()->set_response(response.SerializeAsString());
    r.set_first_seen_ms(clock.NowMs());
    r.set_updated_ms(clock.NowMs());
    r.set_attempts(1);
    raw_bytes += static_cast<int64_t>(c.idempotency_key().size() + 32 +
                                      r.result().response().size());
    EONCE_RETURN_IF_ERROR(store.Write(r, Record::STATE_UNSPECIFIED, false));
  }
  EONCE_RETURN_IF_ERROR(store.CompactAll());
  return raw_bytes;
}

int64_t SstBytes(const std::string& dir) {
  int64_t total = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.is_regular_file() && entry.path().extension() == ".sst") {
      total += static_cast<int64_t>(entry.file_size());
    }
  }
  return total;
}

// Duplicates of the store's records, from all over its key space.
IssueFn Duplicates(v1::Sidecar::Stub& stub, int64_t records, int accounts) {
  return [&stub, records, accounts](int64_t i, std::function<void(bool)> done) {
    int64_t j = (i * 7919) % records;
    SubmitAsync(stub, StoredCommand(j, accounts), v1::REPLAYED, std::move(done));
  };
}

}  // namespace

absl::Status BenchLargeStore(const MeasureOptions& measure, const std::string& bin_dir,
                             const std::string& dir, int64_t records, int accounts,
                             int block_cache_mb, LargeStoreFigures* out) {
  const std::string large_dir = dir + "/large";
  const std::string small_dir = dir + "/small";
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) return absl::InternalError(absl::StrCat("mkdir ", dir, ": ", error.message()));
  EONCE_ASSIGN_OR_RETURN(out->raw_bytes, Populate(large_dir, records, accounts));
  EONCE_RETURN_IF_ERROR(Populate(small_dir, kSmallStoreRecords, accounts).status());
  out->records = records;
  out->sst_bytes = SstBytes(large_dir);

  EONCE_ASSIGN_OR_RETURN(
      auto ledger, Process::Start(bin_dir + "/services/ledger/ledger_service",
                                  {"--listen=127.0.0.1:0", "--data_dir=" + dir + "/ledger"},
                                  dir + "/ledger.log"));
  auto sidecar = [&](const std::string& data_dir, const std::string& name) {
    std::vector<std::string> args = {"--listen=127.0.0.1:0", "--data_dir=" + data_dir,
                                     "--upstream=" + ledger->address()};
    if (block_cache_mb > 0) args.push_back(absl::StrCat("--block_cache_mb=", block_cache_mb));
    return Process::Start(bin_dir + "/dedupe_sidecar/dedupe_sidecar", args,
                          dir + "/" + name + ".log");
  };
  EONCE_ASSIGN_OR_RETURN(auto large, sidecar(large_dir, "large"));
  EONCE_ASSIGN_OR_RETURN(auto small, sidecar(small_dir, "small"));
  auto stub = [](const Process& p) {
    return v1::Sidecar::NewStub(
        grpc::CreateChannel(p.address(), grpc::InsecureChannelCredentials()));
  };
  auto large_stub = stub(*large);
  auto small_stub = stub(*small);
  IssueFn large_issue = Duplicates(*large_stub, records, accounts);
  IssueFn small_issue = Duplicates(*small_stub, kSmallStoreRecords, accounts);

  // A longer warm-up: both processes just started, their caches are cold.
  MeasureOptions options = measure;
  options.warmup_seconds = std::max(2.0, measure.warmup_seconds);
  ClosedLoop(64, options.warmup_seconds, small_issue, 0);
  std::vector<Figures> small_runs;
  out->large = MeasurePaired(options, 64, large_issue, [&](int64_t first) {
    small_runs.push_back(ClosedLoop(64, options.seconds, small_issue, first));
    return small_runs.back();
  });
  out->small = Median(std::move(small_runs));
  out->rss_kb = RssKb(large->pid());
  return absl::OkStatus();
}

}  // namespace eonce::bench
