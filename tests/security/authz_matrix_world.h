// The servers the authorization matrix (authz_matrix_test.cc) calls, in this process, and
// the victim's state it guards:
//   agent                            an outbox agent for tenant acme, on loopback;
//   sidecar, ledger                  a sidecar in front of a ledger, each on loopback;
//   embedded sidecar, embedded
//   ledger's business port           a ledger with its sidecar in process, its business
//                                    port a unix socket (plaintext) or a mutual-TLS port.
// In mutual-TLS mode every port requires a client certificate from a CA made at test time;
// the ledgers are spiffe://eonce.test/eonce/ledger, the sidecar .../eonce/sidecar.
//
// The victim, acme, owns accounts alice and bob behind both sidecars (opened through
// them), an acknowledged outbox record and a queued one (replay then stopped, so the
// outbox changes only by the calls the matrix makes).
#ifndef EONCE_TESTS_SECURITY_AUTHZ_MATRIX_WORLD_H_
#define EONCE_TESTS_SECURITY_AUTHZ_MATRIX_WORLD_H_

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/rpc/tls.h"
#include "dedupe_sidecar/doors/sidecar_service.h"
#include "outbox_agent/doors/agent_server.h"
#include "services/inbox/embedded_sidecar.h"
#include "services/inbox/service_host.h"
#include "services/ledger/ledger_service.h"
#include "tests/security/authz_matrix_judge.h"
#include "tests/security/authz_matrix_rows.h"
#include "tests/util/grpc_probe.h"
#include "tests/util/test_pki.h"

namespace eonce::authz {

// Who calls: the table's column, and what it presents.
struct Caller {
  Column column;
  std::string name;
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  testing::Headers headers;
};

// One door of one server; `door` names the table's kind of door.
struct Instance {
  std::string name;
  std::string door;
  std::string address;
  // For a sidecar: its business, whose services its pass-through reaches.
  std::string business_address;
};

class World {
 public:
  // Starts the servers under `dir` and gives the victim its state; the entitled calls
  // that do so are the negative control of every refusal (the right identity gets in).
  static absl::StatusOr<std::unique_ptr<World>> Start(Mode mode, const std::string& dir);
  ~World();

  Mode mode() const { return mode_; }
  const std::vector<Instance>& instances() const { return instances_; }
  // The callers that must not get what they are not entitled to (claims only in mTLS).
  std::vector<Caller> Callers();
  // The victim's operator: reads every door's reflection.
  const Caller& victim_operator() const { return oncall_; }
  // A channel as `caller` to `address`, made once.
  std::shared_ptr<grpc::Channel> ChannelOf(const Caller& caller, const std::string& address);
  // The victim's observable state, read as the victim, one fact a line.
  std::string Snapshot();
  // The embedded ledger's business socket (plaintext mode).
  const std::string& business_socket() const { return business_socket_; }
  // The CA that signs every certificate (mutual-TLS mode).
  std::string ca_file() const { return pki_ != nullptr ? pki_->ca_file() : ""; }

 private:
  World(Mode mode, std::string dir) : mode_(mode), dir_(std::move(dir)) {}
  absl::Status StartServers();
  absl::Status SetUpVictim();
  // Each certificate is issued once: its files are watched by every channel that uses them.
  std::shared_ptr<grpc::ChannelCredentials> Certificate(const std::string& name);

  const Mode mode_;
  const std::string dir_;
  std::unique_ptr<testing::TestPki> pki_;
  TlsFiles ledger_tls_, sidecar_tls_, agent_tls_;
  std::string policy_file_;
  std::string business_socket_;
  std::unique_ptr<LedgerServer> ledger_;
  std::unique_ptr<SidecarServer> sidecar_;
  std::unique_ptr<ServiceHost> embedded_host_;
  std::unique_ptr<EmbeddedSidecar> embedded_;
  std::unique_ptr<AgentServer> agent_;
  std::vector<Instance> instances_;
  Caller payroll_, oncall_, checker_;  // the victim's own readers
  std::map<std::pair<std::string, std::string>, std::shared_ptr<grpc::Channel>> channels_;
  std::map<std::string, std::shared_ptr<grpc::ChannelCredentials>> credentials_;
};

}  // namespace eonce::authz

#endif  // EONCE_TESTS_SECURITY_AUTHZ_MATRIX_WORLD_H_
