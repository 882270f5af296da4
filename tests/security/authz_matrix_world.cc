#include "tests/security/authz_matrix_world.h"

#include <chrono>
#include <fstream>
#include <sstream>
#include <tuple>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/base/clock.h"
#include "common/command/command.h"
#include "common/base/random.h"
#include "common/base/status.h"
#include "eonce/ledger/v1/ledger.grpc.pb.h"
#include "eonce/v1/agent.grpc.pb.h"
#include "eonce/v1/outcome.grpc.pb.h"
#include "eonce/v1/sidecar.grpc.pb.h"
#include "services/ledger/ledger.h"
#include "services/ledger/ledger_in_process.h"
#include "tests/security/authz_matrix_requests.h"
#include "tests/util/agent_wait.h"
#include "tests/util/temp_dir.h"

namespace eonce::authz {
namespace {

std::unique_ptr<grpc::ClientContext> Context() {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::milliseconds(testing::kProbeTimeoutMs));
  return context;
}

absl::Status Failed(const std::string& what, const grpc::Status& status) {
  return absl::InternalError(absl::StrCat(what, ": ", status.error_message()));
}

// The mTLS callers' certificates: name, then its URI SANs.
const std::vector<std::pair<std::string, std::string>>& CallerCertificates() {
  static const auto* certificates = new std::vector<std::pair<std::string, std::string>>{
      {"anonymous", ""},
      {"globex", WorkloadId(kOther, "shop") + ",URI:" + OperatorId(kOther, "oncall")},
      {"payroll", WorkloadId(kVictim, "payroll")},
      {"mallory", WorkloadId(kVictim, "mallory")},
      {"laptop", WorkloadId(kVictim, "laptop") + ",URI:urn:eonce:credential-epoch:2"},
      {"oncall", OperatorId(kVictim, "oncall")},
      {"checker", SpiffeId("eonce/checker")},
  };
  return *certificates;
}

}  // namespace

absl::StatusOr<std::unique_ptr<World>> World::Start(Mode mode, const std::string& dir) {
  std::unique_ptr<World> world(new World(mode, dir));
  if (mode == Mode::kMutualTls) {
    auto pki = testing::TestPki::Create(dir, "root");
    if (!pki.ok()) return pki.status();
    world->pki_ = std::make_unique<testing::TestPki>(*pki);
    for (auto [files, name, id] :
         {std::make_tuple(&world->ledger_tls_, "ledger", SpiffeId("eonce/ledger")),
          std::make_tuple(&world->sidecar_tls_, "sidecar", SpiffeId("eonce/sidecar")),
          std::make_tuple(&world->agent_tls_, "agent", WorkloadId(kVictim, "agent"))}) {
      auto issued = world->pki_->Issue(name, id);
      if (!issued.ok()) return issued.status();
      *files = *issued;
    }
    for (const auto& [name, id] : CallerCertificates()) {
      auto issued = world->pki_->Issue(name, id);
      if (!issued.ok()) return issued.status();
      world->credentials_[name] = ChannelCredentials(*issued);
    }
    world->payroll_ = {kWorkload, "reader payroll", world->Certificate("payroll"), {}};
    world->oncall_ = {kWorkload, "reader oncall", world->Certificate("oncall"),
                      {{kTenantHeader, kVictim}}};
    world->checker_ = {kWorkload, "reader checker", world->Certificate("checker"),
                       {{kTenantHeader, kVictim}}};
  } else {
    world->payroll_ = {kWorkload,
                       "reader payroll",
                       grpc::InsecureChannelCredentials(),
                       {{kTenantHeader, kVictim}, {kWorkloadHeader, "payroll"}}};
    world->oncall_ = {kWorkload,
                      "reader oncall",
                      grpc::InsecureChannelCredentials(),
                      {{kTenantHeader, kVictim}, {kOperatorHeader, "oncall"}}};
    world->checker_ = {kWorkload,
                       "reader checker",
                       grpc::InsecureChannelCredentials(),
                       {{kTenantHeader, kVictim}, {kComponentHeader, "checker"}}};
  }
  world->policy_file_ = dir + "/policy";
  std::ofstream(world->policy_file_) << PolicyText();
  EONCE_RETURN_IF_ERROR(world->StartServers());
  EONCE_RETURN_IF_ERROR(world->SetUpVictim());
  return world;
}

std::shared_ptr<grpc::ChannelCredentials> World::Certificate(const std::string& name) {
  return credentials_.at(name);
}

std::vector<Caller> World::Callers() {
  if (mode_ == Mode::kPlaintext) {
    auto plain = grpc::InsecureChannelCredentials();
    return {
        {kNoIdentity, "no eonce-* header", plain, {}},
        {kOtherTenant,
         "globex workload shop and operator oncall",
         plain,
         {{kTenantHeader, kOther}, {kWorkloadHeader, "shop"}, {kOperatorHeader, "oncall"}}},
        {kWorkload,
         "acme workload payroll",
         plain,
         {{kTenantHeader, kVictim}, {kWorkloadHeader, "payroll"}}},
        {kRevoked,
         "acme workload mallory (revoke rule)",
         plain,
         {{kTenantHeader, kVictim}, {kWorkloadHeader, "mallory"}}},
        {kRevoked,
         "acme workload laptop at epoch 2 (below_epoch=3)",
         plain,
         {{kTenantHeader, kVictim}, {kWorkloadHeader, "laptop"}, {kCredentialEpochHeader, "2"}}},
    };
  }
  return {
      {kNoIdentity, "certificate naming no identity", Certificate("anonymous"), {}},
      {kOtherTenant, "globex certificate: workload shop and operator oncall", Certificate("globex"),
       {}},
      {kWorkload, "acme workload payroll's certificate", Certificate("payroll"), {}},
      {kRevoked, "acme workload mallory's certificate (revoke rule)", Certificate("mallory"), {}},
      {kRevoked,
       "acme workload laptop's certificate at epoch 2 (below_epoch=3)",
       Certificate("laptop"),
       {}},
      {kClaimsTenant,
       "globex certificate with eonce-tenant: acme",
       Certificate("globex"),
       {{kTenantHeader, kVictim}}},
      {kClaimsRole,
       "acme payroll's certificate with eonce-operator and eonce-component",
       Certificate("payroll"),
       {{kOperatorHeader, "oncall"}, {kComponentHeader, "sidecar"}}},
  };
}

std::shared_ptr<grpc::Channel> World::ChannelOf(const Caller& caller, const std::string& address) {
  auto& channel = channels_[{caller.name, address}];
  if (channel == nullptr) {
    channel = testing::ChannelWithHeaders(address, caller.credentials, caller.headers);
  }
  return channel;
}

absl::Status World::StartServers() {
  Clock& clock = RealClock::Get();
  const bool mtls = mode_ == Mode::kMutualTls;
  LedgerServerOptions ledger;
  ledger.listen_address = "127.0.0.1:0";
  ledger.data_dir = dir_ + "/ledger";
  ledger.tls = ledger_tls_;
  EONCE_ASSIGN_OR_RETURN(ledger_, LedgerServer::Start(ledger, clock));
  const std::string ledger_address = absl::StrCat("127.0.0.1:", ledger_->port());

  SidecarServerOptions sidecar;
  sidecar.listen_address = "127.0.0.1:0";
  sidecar.data_dir = dir_ + "/sidecar";
  sidecar.upstream_address = ledger_address;
  sidecar.policy_file = policy_file_;
  sidecar.tls = sidecar_tls_;
  sidecar.deduper.lease_ms = 2'000;
  sidecar.deduper.forward_timeout_ms = 1'000;
  sidecar.deduper.outcome_query_timeout_ms = 500;
  EONCE_ASSIGN_OR_RETURN(sidecar_, SidecarServer::Start(sidecar, clock));
  const std::string sidecar_address = absl::StrCat("127.0.0.1:", sidecar_->port());

  // The ledger with its sidecar in process: its business port is a socket only its user
  // may open, or a mutual-TLS port.
  ServiceHostOptions host;
  business_socket_ = testing::SocketDir() + "/business.sock";
  host.listen_address = mtls ? "127.0.0.1:0" : "unix:" + business_socket_;
  host.data_dir = dir_ + "/embedded-ledger";
  host.tls = ledger_tls_;
  host.metrics_name = "ledger";
  LedgerCore* core = nullptr;
  EONCE_ASSIGN_OR_RETURN(embedded_host_, ServiceHost::Start(host, clock,
                                                            LedgerCore::ColumnFamilies(),
                                                            LedgerSetup(nullptr, &core)));
  const std::string business_address =
      mtls ? absl::StrCat("127.0.0.1:", embedded_host_->port()) : host.listen_address;
  EmbeddedSidecarOptions in_process;
  in_process.listen_address = "127.0.0.1:0";
  in_process.data_dir = dir_ + "/embedded-sidecar";
  in_process.policy_file = policy_file_;
  in_process.tls = ledger_tls_;
  EONCE_ASSIGN_OR_RETURN(embedded_, EmbeddedSidecar::Start(in_process, embedded_host_->inbox(),
                                                           LedgerHandlers(*core), clock));
  const std::string embedded_address = absl::StrCat("127.0.0.1:", embedded_->port());

  AgentServerOptions agent;
  agent.listen_address = "127.0.0.1:0";
  agent.data_dir = dir_ + "/agent";
  agent.tenant = kVictim;
  agent.default_sidecar = sidecar_address;
  agent.tls = agent_tls_;
  EONCE_ASSIGN_OR_RETURN(agent_, AgentServer::Start(agent, clock, RealRandom::Get()));
  const std::string agent_address = absl::StrCat("127.0.0.1:", agent_->port());

  instances_ = {{"agent", "agent", agent_address, ""},
                {"sidecar", "sidecar", sidecar_address, ledger_address},
                {"ledger", "business", ledger_address, ""},
                {"embedded sidecar", "sidecar", embedded_address, business_address},
                {"embedded ledger's business port", "business", business_address, ""}};
  return absl::OkStatus();
}

World::~World() {
  // Callers first: the agent calls the sidecar, the sidecars call their ledgers.
  if (agent_ != nullptr) agent_->Shutdown(1'000).IgnoreError();
  if (embedded_ != nullptr) embedded_->Shutdown(1'000).IgnoreError();
  if (embedded_host_ != nullptr) embedded_host_->Shutdown(1'000).IgnoreError();
  if (sidecar_ != nullptr) sidecar_->Shutdown(1'000).IgnoreError();
  if (ledger_ != nullptr) ledger_->Shutdown(1'000).IgnoreError();
}

absl::Status World::SetUpVictim() {
  for (const Instance& sidecar : instances_) {
    if (sidecar.door != "sidecar") continue;
    auto stub = v1::Sidecar::NewStub(ChannelOf(payroll_, sidecar.address));
    for (auto [command_id, account] : {std::make_pair(kSubmitted, kAccount),
                                       std::make_pair(kSecondSubmitted, kSecondAccount)}) {
      v1::SubmitRequest request;
      *request.mutable_command() = SidecarCommand(command_id, account);
      v1::SubmitResponse response;
      auto context = Context();
      grpc::Status submitted = stub->Submit(context.get(), request, &response);
      if (!submitted.ok()) return Failed(sidecar.name + ": the victim's Submit", submitted);
      if (response.result().code() != 0) {
        return absl::InternalError(sidecar.name + ": " + response.DebugString());
      }
    }
  }
  const std::string& agent_address = instances_.front().address;
  auto agent = v1::Agent::NewStub(ChannelOf(payroll_, agent_address));
  auto enqueue = [&](const std::string& command_id, const std::string& account) {
    v1::EnqueueRequest request;
    *request.mutable_command() = ProducerCommand(command_id, account);
    v1::EnqueueResponse response;
    auto context = Context();
    return agent->Enqueue(context.get(), request, &response);
  };
  if (grpc::Status s = enqueue(kOutboxAcked, "carol"); !s.ok()) return Failed("Enqueue", s);
  absl::StatusOr<v1::OutboxRecord> acked = testing::WaitUntilFinal(*agent, kOutboxAcked);
  if (!acked.ok()) return acked.status();
  if (acked->state() != v1::ACKED) return absl::InternalError(acked->DebugString());
  // Replay stops, so that what the outbox holds changes only by the matrix's calls.
  auto as_operator = v1::Agent::NewStub(ChannelOf(oncall_, agent_address));
  v1::SetCredentialRequest revoke;
  revoke.set_epoch(2);
  revoke.set_revoked(true);
  v1::SetCredentialResponse revoked;
  auto context = Context();
  if (grpc::Status s = as_operator->SetCredential(context.get(), revoke, &revoked); !s.ok()) {
    return Failed("SetCredential", s);
  }
  if (grpc::Status s = enqueue(kOutboxQueued, "dave"); !s.ok()) return Failed("Enqueue", s);
  return absl::OkStatus();
}

std::string World::Snapshot() {
  std::ostringstream out;
  auto line = [&out](const std::string& where, const grpc::Status& status,
                     const std::string& what) {
    out << where << ": " << (status.ok() ? what : "ERROR " + status.error_message()) << "\n";
  };
  for (const Instance& instance : instances_) {
    if (instance.door == "agent") {
      auto agent = v1::Agent::NewStub(ChannelOf(payroll_, instance.address));
      v1::ListRequest list;
      list.set_limit(1000);
      v1::ListResponse records;
      auto context = Context();
      grpc::Status listed = agent->List(context.get(), list, &records);
      std::string text;
      for (const auto& r : records.records()) {
        absl::StrAppend(&text, " ", r.command().command_id(), "=", v1::OutboxState_Name(r.state()));
      }
      line("agent records", listed, text);
      v1::StatsResponse stats;
      auto stats_context = Context();
      grpc::Status counted = agent->Stats(stats_context.get(), v1::StatsRequest(), &stats);
      text = absl::StrCat("epoch ", stats.credential_epoch(), " revoked ", stats.revoked());
      for (const auto& c : stats.counts()) absl::StrAppend(&text, " ", c.state(), ":", c.count());
      line("agent stats", counted, text);
    } else if (instance.door == "sidecar") {
      // As the victim's operator, who may look up any of its tenant's keys (a workload may
      // look up only the commands the policy lets it act for).
      auto sidecar = v1::Sidecar::NewStub(ChannelOf(oncall_, instance.address));
      std::vector<std::pair<bool, std::string>> lookups;  // (by command id, the id or key)
      for (const char* id : {kSubmitted, kSecondSubmitted, kOutboxAcked, kOutboxQueued}) {
        lookups.emplace_back(true, id);
      }
      for (const Row& row : kMatrix) {
        if (std::string(row.door) == "pass-through") {
          lookups.emplace_back(false, AttackKey(row.method));
        }
      }
      for (const auto& [by_id, name] : lookups) {
        v1::ReconcileRequest request;
        by_id ? request.set_command_id(name) : request.set_idempotency_key(name);
        v1::ReconcileResponse record;
        auto context = Context();
        grpc::Status found = sidecar->Reconcile(context.get(), request, &record);
        line(absl::StrCat(instance.name, " record ", name), found,
             absl::StrCat(v1::RecordState_Name(record.state()), " ", record.command_id(), " ",
                          absl::BytesToHexString(record.payload_sha256()), " ",
                          record.result().response().size()));
      }
      auto admin = v1::SidecarAdmin::NewStub(ChannelOf(oncall_, instance.address));
      v1::ListParkedRequest parked_request;
      parked_request.set_limit(1000);
      v1::ListParkedResponse parked;
      auto context = Context();
      grpc::Status listed = admin->ListParked(context.get(), parked_request, &parked);
      line(instance.name + " parked", listed, absl::StrCat(parked.records_size()));
    } else if (instance.door == "business") {
      // As an eonce component (a ground-truth checker): on a business port an operator
      // reads effects and outcomes only.
      auto channel = ChannelOf(checker_, instance.address);
      auto ledger = ledger::v1::Ledger::NewStub(channel);
      for (const char* id : {kAccount, kSecondAccount}) {
        ledger::v1::GetAccountRequest request;
        request.set_id(id);
        ledger::v1::Account account;
        auto context = Context();
        grpc::Status read = ledger->GetAccount(context.get(), request, &account);
        line(absl::StrCat(instance.name, " account ", id), read,
             absl::StrCat(account.tenant(), " ", account.balance(), " rev ", account.revision()));
      }
      auto effects = v1::Effects::NewStub(channel);
      v1::ListEffectsRequest request;
      request.set_limit(10'000);
      v1::ListEffectsResponse listed_effects;
      auto context = Context();
      grpc::Status listed = effects->ListEffects(context.get(), request, &listed_effects);
      std::string text;
      for (const auto& e : listed_effects.effects()) {
        absl::StrAppend(&text, " [", e.seq(), " ", e.tenant(), " ", e.command_id(), " ",
                        e.method(), " ", e.entity(), " ", e.amount(), "]");
      }
      line(instance.name + " effects", listed, text);
    }
  }
  return out.str();
}

}  // namespace eonce::authz
