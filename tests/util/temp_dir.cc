#include "tests/util/temp_dir.h"

#include <atomic>
#include <cstdlib>
#include <filesystem>

namespace eonce::testing {

std::string FreshDir(const std::string& name) {
  static std::atomic<int> counter{0};
  const char* base = std::getenv("TEST_TMPDIR");
  std::filesystem::path path = std::filesystem::path(base != nullptr ? base : "/tmp") /
                               (name + "." + std::to_string(counter.fetch_add(1)));
  std::filesystem::remove_all(path);
  std::filesystem::create_directories(path);
  return path.string();
}

std::string SocketDir() {
  char folder[] = "/tmp/eonce-sock-XXXXXX";
  if (mkdtemp(folder) == nullptr) std::abort();
  return folder;
}

}  // namespace eonce::testing
