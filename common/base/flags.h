// Flag parsing for every eonce binary and command-line tool, in one place.
//
//   --help (or -h) prints the usage line and the program's own flags, each with its
//   default and, for a server, its environment variable, and exits 0. (--helpfull still
//   lists every flag linked in, Abseil's included.)
//   A server's flag --foo_bar may also be set by the environment variable EONCE_FOO_BAR;
//   the command line wins.
//   An unknown flag or a bad value, on the command line or in the environment, exits 2
//   with a message naming the flag: bad configuration is exit code 2 everywhere.
#ifndef EONCE_COMMON_BASE_FLAGS_H_
#define EONCE_COMMON_BASE_FLAGS_H_

#include <string>
#include <vector>

namespace eonce {

struct Program {
  // What the program is, and how to call it: "dedupe_sidecar --data_dir=DIR ...".
  const char* usage = "";
  // Servers read EONCE_<FLAG> from the environment too.
  bool from_environment = false;
};

// Parses argv as described above; returns the positional arguments (argv[0] first).
std::vector<char*> ParseFlags(int argc, char** argv, const Program& program);

// The environment variable that sets flag `name`: EONCE_<NAME in capitals>.
std::string FlagEnvironmentName(const std::string& name);

// The --help text: the usage line and the program's own flags (those not defined by
// Abseil itself).
std::string FlagHelp(const Program& program);

}  // namespace eonce

#endif  // EONCE_COMMON_BASE_FLAGS_H_
