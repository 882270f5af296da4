// The unix sockets a server listens on are its own user's from the moment they exist, not
// only once the server has started (a caller that connects in between would be trusted as
// a local one).
#include "common/rpc/server.h"

#include <sys/stat.h>

#include <string>

#include "grpcpp/security/server_credentials.h"
#include "gtest/gtest.h"
#include "tests/util/temp_dir.h"

namespace eonce {
namespace {

mode_t ModeOf(const std::string& path) {
  struct stat info;
  if (stat(path.c_str(), &info) != 0) return 07777;
  EXPECT_TRUE(S_ISSOCK(info.st_mode)) << path;
  return info.st_mode & 0777;
}

class UmaskGuard {
 public:
  explicit UmaskGuard(mode_t mask) : before_(umask(mask)) {}
  ~UmaskGuard() { umask(before_); }

 private:
  mode_t before_;
};

TEST(ServerTest, AUnixSocketIsOwnerOnlyAsItIsCreated) {
  // The usual umask lets everyone open a new socket.
  UmaskGuard usual(0022);
  const std::string path = testing::SocketDir() + "/owner.sock";
  grpc::ServerBuilder builder;
  ASSERT_TRUE(AddLocalSocket(builder, "unix:" + path).ok());
  // Nothing has changed the mode after the bind: what the kernel made is what we see.
  std::unique_ptr<grpc::Server> server = BuildOwnerOnly(builder);
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(ModeOf(path) & 0077, 0u) << std::oct << ModeOf(path);
  // The process's umask is as it was.
  EXPECT_EQ(umask(0022), 0022u);
  server->Shutdown();
}

TEST(ServerTest, BuildAndServeLeavesEverySocket0600) {
  UmaskGuard usual(0022);
  const std::string dir = testing::SocketDir();
  grpc::ServerBuilder builder;
  int port = 0;
  ASSERT_TRUE(AddListener(builder, "unix:" + dir + "/main.sock", TlsFiles(), &port).ok());
  ASSERT_TRUE(AddLocalSocket(builder, "unix:" + dir + "/local.sock").ok());
  auto server = BuildAndServe(builder, "unix:" + dir + "/main.sock", "unix:" + dir + "/local.sock");
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ(ModeOf(dir + "/main.sock"), 0600u);
  EXPECT_EQ(ModeOf(dir + "/local.sock"), 0600u);
  (*server)->Shutdown();
}

}  // namespace
}  // namespace eonce
