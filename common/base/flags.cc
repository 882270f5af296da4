#include "common/base/flags.h"

#include <cctype>
#include <cstdlib>
#include <iostream>
#include <map>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace eonce {
namespace {

// Abseil defines a few flags of its own (--flagfile, --fromenv, ...): not the program's.
bool IsOwnFlag(const absl::CommandLineFlag& flag) {
  return !absl::StrContains(flag.Filename(), "absl/");
}

bool IsAbseilUsageFlag(const std::string& name) {
  for (const char* usage : {"helpfull", "helpshort", "helppackage", "helpon", "helpmatch",
                            "version", "only_check_args"}) {
    if (name == usage) return true;
  }
  return false;
}

[[noreturn]] void BadConfiguration(const std::string& message) {
  std::cerr << message << "\n";
  std::exit(2);
}

// Checks each --name[=value] on the command line before Abseil parses it, so that an
// unknown flag or a bad value exits 2 with a message naming the flag (Abseil exits 1).
void CheckCommandLine(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (!absl::StartsWith(arg, "-") || arg == "-") continue;
    arg.remove_prefix(absl::StartsWith(arg, "--") ? 2 : 1);
    size_t equals = arg.find('=');
    std::string name(arg.substr(0, equals));
    // Abseil's own usage flags (--helpfull, --helpmatch=...) are not registered flags.
    if (IsAbseilUsageFlag(name)) continue;
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr && absl::StartsWith(name, "no")) {
      absl::CommandLineFlag* negated = absl::FindCommandLineFlag(name.substr(2));
      if (negated != nullptr && negated->IsOfType<bool>() && equals == absl::string_view::npos) {
        continue;
      }
    }
    if (flag == nullptr) {
      BadConfiguration(absl::StrCat("unknown flag --", name, " (--help lists the flags)"));
    }
    std::string value;
    if (equals != absl::string_view::npos) {
      value = std::string(arg.substr(equals + 1));
    } else if (flag->IsOfType<bool>()) {
      continue;
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      BadConfiguration(absl::StrCat("flag --", name, " needs a value"));
    }
    std::string error;
    if (!flag->ParseFrom(value, &error)) {
      BadConfiguration(absl::StrCat("bad value for flag --", name, ": ", error));
    }
  }
}

void ApplyEnvironment() {
  for (auto& [name, flag] : absl::GetAllFlags()) {
    if (!IsOwnFlag(*flag)) continue;
    std::string env_name = FlagEnvironmentName(std::string(name));
    const char* value = std::getenv(env_name.c_str());
    if (value == nullptr) continue;
    std::string error;
    if (!flag->ParseFrom(value, &error)) {
      BadConfiguration(absl::StrCat("bad value for flag --", name, " (from ", env_name,
                                    "): ", error));
    }
  }
}

bool AsksForHelp(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (arg == "--help" || arg == "-help" || arg == "-h") return true;
  }
  return false;
}

}  // namespace

std::string FlagEnvironmentName(const std::string& name) {
  std::string env_name = "EONCE_";
  for (char c : name) env_name.push_back(static_cast<char>(std::toupper(c)));
  return env_name;
}

std::string FlagHelp(const Program& program) {
  std::map<std::string, const absl::CommandLineFlag*> own;
  for (auto& [name, flag] : absl::GetAllFlags()) {
    if (IsOwnFlag(*flag)) own.emplace(std::string(name), flag);
  }
  std::string out = absl::StrCat("Usage: ", program.usage, "\n\nFlags");
  if (program.from_environment) {
    absl::StrAppend(&out, " (each may also be set by the environment variable shown; the "
                          "command line wins)");
  }
  absl::StrAppend(&out, ":\n");
  for (const auto& [name, flag] : own) {
    const std::string fallback = flag->DefaultValue();
    absl::StrAppend(&out, "  --", name, "=", fallback.empty() ? "\"\"" : fallback);
    if (program.from_environment) absl::StrAppend(&out, "   [", FlagEnvironmentName(name), "]");
    absl::StrAppend(&out, "\n      ", flag->Help(), "\n");
  }
  absl::StrAppend(&out, "\nExit codes: 0 done, 1 failed, 2 bad configuration.\n");
  return out;
}

std::vector<char*> ParseFlags(int argc, char** argv, const Program& program) {
  absl::SetProgramUsageMessage(program.usage);
  if (AsksForHelp(argc, argv)) {
    std::cout << FlagHelp(program);
    std::exit(0);
  }
  if (program.from_environment) ApplyEnvironment();
  CheckCommandLine(argc, argv);
  return absl::ParseCommandLine(argc, argv);
}

}  // namespace eonce
