// The authorization matrix: every method every eonce server registers, called by every
// caller that must not get what it is not entitled to, in plaintext on loopback
// (identities from headers) and under mutual TLS (identities from certificates made at
// test time). The table is authz_matrix_rows.h; the servers and the victim's state are
// authz_matrix_world.h; what each method is sent is authz_matrix_requests.h.
//
// The methods are not listed by hand: each server is asked through gRPC server reflection
// which services it has, and each service's methods come from protobuf's generated pool;
// a sidecar's pass-through counts the services its business lists. A registered method
// without a row, or a row no server registers, fails the test.
//
// Before and after every call the victim's state is read as the victim; a refused call,
// and any call by another tenant, must leave it as it was, and an answer another tenant
// gets must not name the victim. Every cell's outcome is written to
// authz_matrix_<mode>.txt in the test's undeclared outputs.
#include <sys/stat.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/command/command.h"
#include "google/protobuf/descriptor.h"
#include "grpc/health/v1/health.pb.h"
#include "gtest/gtest.h"
#include "tests/security/authz_matrix_judge.h"
#include "tests/security/authz_matrix_requests.h"
#include "tests/security/authz_matrix_rows.h"
#include "tests/security/authz_matrix_world.h"
#include "tests/util/grpc_probe.h"
#include "tests/util/process.h"
#include "tests/util/temp_dir.h"

namespace eonce::authz {
namespace {

// One method at one door of one server.
struct Target {
  std::string instance;
  std::string door;
  std::string address;
  std::string method;
  const google::protobuf::MethodDescriptor* descriptor;
};

// Every method each server registers, found by reflection.
std::vector<Target> Enumerate(World& world) {
  const google::protobuf::DescriptorPool* pool = google::protobuf::DescriptorPool::generated_pool();
  std::vector<Target> targets;
  auto add = [&](const Instance& instance, const std::string& door, const std::string& service) {
    const google::protobuf::ServiceDescriptor* found = pool->FindServiceByName(service);
    if (found == nullptr) {
      ADD_FAILURE() << instance.name << " lists service " << service
                    << ", which is not in protobuf's generated pool: link its cc library";
      return;
    }
    for (int i = 0; i < found->method_count(); ++i) {
      const google::protobuf::MethodDescriptor* m = found->method(i);
      targets.push_back({instance.name, door, instance.address,
                         absl::StrCat("/", service, "/", m->name()), m});
    }
  };
  for (const Instance& instance : world.instances()) {
    auto listed =
        testing::ReflectedServices(world.ChannelOf(world.victim_operator(), instance.address));
    if (!listed.ok()) {
      ADD_FAILURE() << instance.name << ": reflection: " << listed.status();
      continue;
    }
    for (const std::string& service : *listed) add(instance, instance.door, service);
    if (instance.business_address.empty()) continue;
    // What the pass-through reaches: the business's services the sidecar does not serve.
    auto business = testing::ReflectedServices(
        world.ChannelOf(world.victim_operator(), instance.business_address));
    if (!business.ok()) {
      ADD_FAILURE() << instance.name << "'s business: reflection: " << business.status();
      continue;
    }
    const std::set<std::string> own(listed->begin(), listed->end());
    for (const std::string& service : *business) {
      if (own.count(service) == 0) add(instance, "pass-through", service);
    }
  }
  std::sort(targets.begin(), targets.end(), [](const Target& a, const Target& b) {
    return std::tie(a.instance, a.method) < std::tie(b.instance, b.method);
  });
  return targets;
}

// Every registered method has a row, and every row a registered method.
bool Covered(const std::vector<Target>& targets) {
  std::set<std::pair<std::string, std::string>> registered, rows;
  for (const Target& t : targets) registered.emplace(t.door, t.method);
  bool covered = true;
  for (const Row& row : kMatrix) {
    if (!rows.emplace(row.door, row.method).second) {
      covered = false;
      ADD_FAILURE() << "two rows for " << row.method << " at the " << row.door << " door";
    }
  }
  for (const auto& [door, method] : registered) {
    if (rows.count({door, method}) > 0) continue;
    covered = false;
    ADD_FAILURE() << "no row for " << method << " at the " << door
                  << " door: decide who may call it (tests/security/authz_matrix_rows.h)";
  }
  for (const auto& [door, method] : rows) {
    if (registered.count({door, method}) > 0) continue;
    covered = false;
    ADD_FAILURE() << "a row for " << method << " at the " << door
                  << " door, which no server registers: remove it, or fix its name";
  }
  return covered;
}

bool GapApplies(const Expect& cell, Mode mode) {
  return cell.gap != nullptr && (cell.gap_in == GapIn::kBothModes ||
                                 (cell.gap_in == GapIn::kPlaintext && mode == Mode::kPlaintext));
}

class AuthzMatrixTest : public ::testing::TestWithParam<Mode> {
 protected:
  void SetUp() override {
    auto world = World::Start(GetParam(), testing::FreshDir(absl::StrCat("authz-", Name())));
    ASSERT_TRUE(world.ok()) << world.status();
    world_ = std::move(*world);
  }

  const char* Name() const { return ModeName(GetParam()); }

  std::unique_ptr<World> world_;
};

TEST_P(AuthzMatrixTest, EveryMethodRefusesWhoIsNotEntitled) {
  const Mode mode = GetParam();
  // grpc.health.v1 in the generated pool (gRPC registers no descriptors of its own).
  ASSERT_NE(grpc::health::v1::HealthCheckRequest::descriptor(), nullptr);
  const std::vector<Target> targets = Enumerate(*world_);
  ASSERT_FALSE(targets.empty());
  const bool covered = Covered(targets);

  std::map<std::pair<std::string, std::string>, const Row*> rows;
  for (const Row& row : kMatrix) rows[{row.door, row.method}] = &row;
  const char* outputs = std::getenv("TEST_UNDECLARED_OUTPUTS_DIR");
  std::ofstream table(absl::StrCat(outputs != nullptr ? outputs : testing::FreshDir("authz"),
                                   "/authz_matrix_", Name(), ".txt"));
  std::set<std::string> methods;
  std::vector<std::string> failures, gaps;
  int calls = 0;
  std::string before = world_->Snapshot();
  ASSERT_FALSE(absl::StrContains(before, "ERROR")) << "the victim cannot read its own state:\n"
                                                   << before;
  for (const Target& target : targets) {
    auto row = rows.find({target.door, target.method});
    if (row == rows.end()) continue;  // reported by Covered
    methods.insert(target.method);
    for (const Caller& caller : world_->Callers()) {
      const Expect& cell = row->second->cells[caller.column];
      testing::Headers metadata;
      if (target.door == "pass-through" && ReadOnly().count(target.method) == 0) {
        metadata.emplace_back(kTransparentKeyHeader, AttackKey(target.method));
      }
      testing::ProbeAnswer answer = testing::CallMethod(
          world_->ChannelOf(caller, target.address), target.method,
          RequestFor(target.method, ++calls), target.descriptor->server_streaming(), metadata);
      const absl::Status got = FirstItemStatus(*target.descriptor, answer);
      std::string after = world_->Snapshot();
      const bool refusal_expected =
          cell.kind == Expect::kRefused || cell.kind == Expect::kUnidentified;
      const bool outsider = caller.column == kOtherTenant || caller.column == kClaimsTenant;
      std::vector<std::string> wrong;
      if (!Holds(mode, cell, target.door, got)) {
        wrong.push_back(absl::StrCat("expected ", Describe(mode, cell, target.door), ", got ",
                                     Describe(got), got.ok() ? "" : ": ", got.message()));
      }
      if ((refusal_expected || outsider) && after != before) {
        wrong.push_back("the victim's state changed:" + LineDiff(before, after));
      }
      if (outsider && !RefusedForIdentity(got)) {
        bool named = absl::StrContains(got.message(), kVictim);
        for (const std::string& response : answer.responses) {
          named = named || absl::StrContains(response, kVictim);
        }
        if (named) wrong.push_back("the answer names the victim's tenant");
      }
      const bool gap = GapApplies(cell, mode);
      const std::string where =
          absl::StrCat("[", Name(), "] ", target.instance,
                       target.door == "pass-through" ? " pass-through" : "", " ", target.method,
                       " as ", kColumnNames[caller.column], " (", caller.name, ")");
      table << where << ": " << Describe(got)
            << (wrong.empty() ? "" : gap ? "  <- KNOWN GAP" : "  <- DOES NOT HOLD") << "  "
            << got.message().substr(0, 160) << "\n";
      if (gap && wrong.empty()) {
        failures.push_back(where + ": the gap is closed (" + cell.gap +
                           "): take the Gap marker off its cell");
      } else if (gap) {
        gaps.push_back(where + ": " + wrong.front());
      } else if (!wrong.empty()) {
        failures.push_back(where + ": " + absl::StrJoin(wrong, "; ") + "\n    (" +
                           row->second->why + ")");
      }
      before = std::move(after);
    }
  }

  if (mode == Mode::kMutualTls) {
    // A connection without a client certificate cannot be made at all, at any door.
    std::set<std::string> addresses;
    for (const Instance& instance : world_->instances()) addresses.insert(instance.address);
    grpc::SslCredentialsOptions server_only;
    std::ifstream ca(world_->ca_file());
    server_only.pem_root_certs.assign(std::istreambuf_iterator<char>(ca), {});
    for (const std::string& address : addresses) {
      ++calls;
      testing::ProbeAnswer answer = testing::CallMethod(
          testing::ChannelWithHeaders(address, grpc::SslCredentials(server_only), {}),
          "/grpc.health.v1.Health/Check", "", false);
      if (answer.status.code() != absl::StatusCode::kUnavailable) {
        failures.push_back(absl::StrCat("[mtls] ", address, " without a client certificate: ",
                                        Describe(answer.status), " (expected UNAVAILABLE)"));
      }
    }
  } else {
    // The embedded ledger's business port: a socket for its own user only.
    struct stat info;
    ASSERT_EQ(stat(world_->business_socket().c_str(), &info), 0);
    EXPECT_EQ(info.st_mode & 0777, 0600u) << world_->business_socket();
  }

  std::cout << "authz matrix (" << Name() << "): " << methods.size() << " methods, "
            << targets.size() << " method-doors, " << calls << " calls, " << failures.size()
            << " do not hold, " << gaps.size() << " known gaps" << std::endl;
  for (const std::string& gap : gaps) std::cout << "  known gap: " << gap << "\n";
  EXPECT_TRUE(failures.empty()) << failures.size() << " cells of the matrix do not hold:\n"
                                << absl::StrJoin(failures, "\n");
  EXPECT_TRUE(covered);
}

INSTANTIATE_TEST_SUITE_P(Modes, AuthzMatrixTest,
                         ::testing::Values(Mode::kPlaintext, Mode::kMutualTls),
                         [](const ::testing::TestParamInfo<Mode>& info) {
                           return std::string(info.param == Mode::kPlaintext ? "Plaintext"
                                                                             : "MutualTls");
                         });

// A ledger with its sidecar in process has one door for callers (the sidecar's); its own
// business port is a unix socket or a mutual-TLS port, never plaintext TCP, loopback
// included: the binary refuses to start so.
TEST(AuthzDoorsTest, AnEmbeddedLedgerRefusesAPlaintextTcpBusinessPort) {
  const std::string dir = testing::FreshDir("authz-doors");
  auto ledger = Process::Start(
      "services/ledger/ledger_service",
      {"--listen=127.0.0.1:0", "--data_dir=" + dir + "/ledger", "--sidecar_listen=127.0.0.1:0",
       "--sidecar_data_dir=" + dir + "/sidecar"},
      dir + "/ledger.log");
  EXPECT_FALSE(ledger.ok()) << "the embedded ledger started with a plaintext TCP business port";
  if (ledger.ok()) (*ledger)->Signal(SIGTERM, /*wait=*/true);
  // The negative control: the same ledger on a socket starts.
  auto on_socket = Process::Start(
      "services/ledger/ledger_service",
      {"--listen=unix:" + testing::SocketDir() + "/business.sock", "--data_dir=" + dir + "/ledger2",
       "--sidecar_listen=127.0.0.1:0", "--sidecar_data_dir=" + dir + "/sidecar2"},
      dir + "/ledger2.log");
  ASSERT_TRUE(on_socket.ok()) << on_socket.status();
  EXPECT_EQ((*on_socket)->Signal(SIGTERM, /*wait=*/true), 0);
}

}  // namespace
}  // namespace eonce::authz
