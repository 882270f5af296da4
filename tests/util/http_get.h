// A tiny blocking HTTP/1.0 GET for scraping a metrics endpoint in tests.
#ifndef EONCE_TESTS_UTIL_HTTP_GET_H_
#define EONCE_TESTS_UTIL_HTTP_GET_H_

#include <string>

namespace eonce::testing {

// The body of GET http://127.0.0.1:<port><path>, or "" on any error.
std::string HttpGet(int port, const std::string& path);

// Runs `promtool check metrics` on `text`; returns its exit code and puts its output in
// `*output`. Returns -1 when promtool is not installed.
int PromtoolCheck(const std::string& text, std::string* output);

}  // namespace eonce::testing

#endif  // EONCE_TESTS_UTIL_HTTP_GET_H_
