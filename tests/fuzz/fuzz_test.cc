// Runs each fuzz target over its seed corpus, then over a bounded number of seeded
// mutations of it, as a regular test. Long campaigns: tools/fuzz.sh.
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/command/command.h"
#include "common/store/ttl.h"
#include "dedupe_sidecar/store/record_store.h"
#include "gtest/gtest.h"
#include "tests/fuzz/fuzz_targets.h"

namespace eonce::fuzz {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> Corpus(const std::string& name) {
  std::vector<std::string> inputs;
  for (const auto& entry : fs::directory_iterator("tests/fuzz/corpus/" + name)) {
    std::ifstream file(entry.path(), std::ios::binary);
    std::stringstream bytes;
    bytes << file.rdbuf();
    inputs.push_back(bytes.str());
  }
  return inputs;
}

// Flips, inserts and deletes bytes, 20,000 times from a fixed seed.
void RunWithMutations(const std::string& name, int (*target)(const uint8_t*, size_t)) {
  std::vector<std::string> corpus = Corpus(name);
  ASSERT_FALSE(corpus.empty()) << "no seed corpus for " << name;
  for (const std::string& input : corpus) {
    target(reinterpret_cast<const uint8_t*>(input.data()), input.size());
  }
  std::mt19937_64 random(20261130);
  for (int i = 0; i < 20'000; ++i) {
    std::string input = corpus[random() % corpus.size()];
    int edits = 1 + static_cast<int>(random() % 8);
    for (int e = 0; e < edits; ++e) {
      size_t at = input.empty() ? 0 : random() % input.size();
      switch (random() % 3) {
        case 0:
          if (!input.empty()) input[at] = static_cast<char>(random());
          break;
        case 1:
          input.insert(input.begin() + static_cast<long>(at), static_cast<char>(random()));
          break;
        default:
          if (!input.empty()) input.erase(at, 1);
      }
    }
    target(reinterpret_cast<const uint8_t*>(input.data()), input.size());
  }
}

// The seed corpus must reach the accepting paths, not only the rejecting ones.
TEST(FuzzTest, SeedCorpusReachesTheValidPaths) {
  std::ifstream file("tests/fuzz/corpus/command/valid_transfer", std::ios::binary);
  std::stringstream bytes;
  bytes << file.rdbuf();
  v1::Command command;
  ASSERT_TRUE(command.ParseFromString(bytes.str()));
  EXPECT_TRUE(ValidateCommand(command, CommandLimits()).ok())
      << ValidateCommand(command, CommandLimits());
  std::ifstream record_file("tests/fuzz/corpus/record/committed", std::ios::binary);
  std::stringstream record_bytes;
  record_bytes << record_file.rdbuf();
  Framed framed;
  ASSERT_TRUE(DecodeFramed(record_bytes.str(), &framed));
  std::string trimmed;
  EXPECT_TRUE(RecordTrimmer().Trim(framed.payload, &trimmed));
}

TEST(FuzzTest, CommandValidation) { RunWithMutations("command", FuzzCommand); }
TEST(FuzzTest, RecordDecoding) { RunWithMutations("record", FuzzRecord); }
TEST(FuzzTest, PolicyParser) { RunWithMutations("policy", FuzzPolicy); }
TEST(FuzzTest, SlotMap) { RunWithMutations("slot_map", FuzzSlotMap); }
TEST(FuzzTest, PassThroughMetadata) { RunWithMutations("passthrough", FuzzPassThrough); }

}  // namespace
}  // namespace eonce::fuzz
