// The servers link //bazel:jemalloc to replace malloc for the whole process. This checks
// that the link does that: the malloc every library calls (the first in the global
// lookup order) is jemalloc's, not glibc's, and memory it hands out is usable.
#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "gtest/gtest.h"

namespace {

std::string LibraryOf(const char* symbol) {
  void* address = dlsym(RTLD_DEFAULT, symbol);
  if (address == nullptr) return "";
  Dl_info info;
  if (dladdr(address, &info) == 0 || info.dli_fname == nullptr) return "";
  return info.dli_fname;
}

TEST(AllocatorTest, MallocAndFreeAreJemallocs) {
  EXPECT_NE(LibraryOf("malloc").find("libjemalloc"), std::string::npos) << LibraryOf("malloc");
  EXPECT_NE(LibraryOf("free").find("libjemalloc"), std::string::npos) << LibraryOf("free");
  // jemalloc's control interface is there, as only jemalloc exports it.
  EXPECT_NE(dlsym(RTLD_DEFAULT, "mallctl"), nullptr);
}

TEST(AllocatorTest, AllocationsWork) {
  for (size_t size : {1u, 100u, 4096u, 1u << 20}) {
    char* p = static_cast<char*>(std::malloc(size));
    ASSERT_NE(p, nullptr);
    std::memset(p, 0x5a, size);
    EXPECT_EQ(p[size - 1], 0x5a);
    std::free(p);
  }
}

}  // namespace
