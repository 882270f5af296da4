#include "common/rpc/server_security.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace eonce {
namespace {

TlsFiles Mtls() {
  TlsFiles files;
  files.cert_file = "/certs/tls.crt";
  files.key_file = "/certs/tls.key";
  files.ca_file = "/certs/ca.crt";
  return files;
}

TEST(ServerSecurityTest, LoopbackIsTheLoopbackNetworkOnly) {
  for (const char* local : {"127.0.0.1:7100", "127.0.0.1:0", "127.1.2.3:80", "localhost:7100",
                            "LOCALHOST:1", "[::1]:7100", "[::ffff:127.0.0.1]:1"}) {
    EXPECT_TRUE(IsLoopbackAddress(local)) << local;
  }
  for (const char* open : {"0.0.0.0:7100", "[::]:7100", ":7100", "10.0.0.7:7100",
                           "128.0.0.1:1", "ledger:7100", "localhost.evil.com:1",
                           "[::ffff:10.0.0.1]:1", "unix:/tmp/x.sock", "unix-abstract:x",
                           "127.0.0.1", "",
                           // Without brackets gRPC takes it all as the host: 0:0:0:0:0:0:1:7100.
                           "::1:7100"}) {
    EXPECT_FALSE(IsLoopbackAddress(open)) << open;
  }
  EXPECT_TRUE(IsUnixSocketAddress("unix:/run/eonce/ledger.sock"));
  EXPECT_TRUE(IsUnixSocketAddress("unix:///run/eonce/ledger.sock"));
  EXPECT_FALSE(IsUnixSocketAddress("unix:"));
  EXPECT_FALSE(IsUnixSocketAddress("unix-abstract:x"));
}

TEST(ServerSecurityTest, MutualTlsServesAnyAddress) {
  for (const char* address : {"0.0.0.0:7100", "[::]:7100", "127.0.0.1:7100", "unix:/x.sock"}) {
    auto trust = DecideListenerTrust("listen", address, Mtls(), {});
    ASSERT_TRUE(trust.ok()) << address << " " << trust.status();
    EXPECT_EQ(*trust, ListenerTrust::kCertificates) << address;
  }
  // The embedded ledger's business port too.
  auto one_door = DecideListenerTrust("listen", "0.0.0.0:7101", Mtls(),
                                      {/*insecure=*/false, /*plaintext_tcp=*/false});
  ASSERT_TRUE(one_door.ok()) << one_door.status();
  EXPECT_EQ(*one_door, ListenerTrust::kCertificates);
}

TEST(ServerSecurityTest, PlaintextIsForLocalListenersOnly) {
  for (const char* address : {"127.0.0.1:0", "localhost:7100", "[::1]:7100", "unix:/x.sock"}) {
    auto trust = DecideListenerTrust("listen", address, TlsFiles(), {});
    ASSERT_TRUE(trust.ok()) << address << " " << trust.status();
    EXPECT_EQ(*trust, ListenerTrust::kLocalHeaders) << address;
  }
  for (const char* address : {"0.0.0.0:7100", "[::]:0", ":7100", "10.1.2.3:7100", "ledger:7100"}) {
    auto trust = DecideListenerTrust("sidecar_listen", address, TlsFiles(), {});
    ASSERT_FALSE(trust.ok()) << address;
    EXPECT_EQ(trust.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string message(trust.status().message());
    // One line that tells the user what to do, naming every flag that would do it.
    EXPECT_FALSE(absl::StrContains(message, "\n"));
    for (const char* named : {"--sidecar_listen", "--insecure", "--tls_cert", "--tls_key",
                              "--tls_ca"}) {
      EXPECT_TRUE(absl::StrContains(message, named)) << named << " in " << message;
    }
  }
}

TEST(ServerSecurityTest, InsecureOpensPlaintextOnEveryAddressButTheOneDoor) {
  ListenRules insecure{/*insecure=*/true};
  auto open = DecideListenerTrust("listen", "0.0.0.0:7100", TlsFiles(), insecure);
  ASSERT_TRUE(open.ok()) << open.status();
  EXPECT_EQ(*open, ListenerTrust::kInsecureHeaders);
  auto local = DecideListenerTrust("listen", "127.0.0.1:7100", TlsFiles(), insecure);
  ASSERT_TRUE(local.ok()) << local.status();
  EXPECT_EQ(*local, ListenerTrust::kLocalHeaders);

  // --insecure beside TLS files says two opposite things.
  auto both = DecideListenerTrust("listen", "0.0.0.0:7100", Mtls(), insecure);
  ASSERT_FALSE(both.ok());
  EXPECT_EQ(both.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(both.status().message(), "--insecure"));
}

TEST(ServerSecurityTest, TheOneDoorRefusesPlaintextTcpEvenOnLoopback) {
  for (bool insecure : {false, true}) {
    ListenRules one_door{insecure, /*plaintext_tcp=*/false};
    for (const char* address : {"127.0.0.1:7101", "0.0.0.0:7101", "localhost:0"}) {
      auto trust = DecideListenerTrust("listen", address, TlsFiles(), one_door);
      ASSERT_FALSE(trust.ok()) << address;
      EXPECT_EQ(trust.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_TRUE(absl::StrContains(trust.status().message(), "unix:/path"));
      EXPECT_TRUE(absl::StrContains(trust.status().message(), "--tls_cert"));
    }
    auto socket = DecideListenerTrust("listen", "unix:/data/business.sock", TlsFiles(), one_door);
    ASSERT_TRUE(socket.ok()) << socket.status();
    EXPECT_EQ(*socket, ListenerTrust::kLocalHeaders);
  }
}

TEST(ServerSecurityTest, TheGaugeSaysWhetherTheServerIsInsecure) {
  EXPECT_EQ(InsecureGauge(true).name, "eonce_insecure");
  ASSERT_EQ(InsecureGauge(true).metric.size(), 1u);
  EXPECT_EQ(InsecureGauge(true).metric[0].gauge.value, 1.0);
  EXPECT_EQ(InsecureGauge(false).metric[0].gauge.value, 0.0);
}

}  // namespace
}  // namespace eonce
