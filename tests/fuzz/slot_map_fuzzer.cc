// libFuzzer entry point (tools/fuzz.sh builds it with -fsanitize=fuzzer).
#include "tests/fuzz/fuzz_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return eonce::fuzz::FuzzSlotMap(data, size);
}
