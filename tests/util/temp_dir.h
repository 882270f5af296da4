// Test helpers: a fresh directory under TEST_TMPDIR for each call.
#ifndef EONCE_TESTS_UTIL_TEMP_DIR_H_
#define EONCE_TESTS_UTIL_TEMP_DIR_H_

#include <string>

namespace eonce::testing {

// Creates and returns an empty directory, unique within the test process.
std::string FreshDir(const std::string& name);

// Creates and returns an empty directory under /tmp with a short path, for unix sockets
// (whose paths must stay under 108 bytes, shorter than TEST_TMPDIR often is).
std::string SocketDir();

}  // namespace eonce::testing

#endif  // EONCE_TESTS_UTIL_TEMP_DIR_H_
