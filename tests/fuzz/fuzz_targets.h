// Fuzz targets for what arrives from outside: commands (request validation), stored
// records (decoding, trimming), policy files (the parser), slot maps and the pass-through
// path's metadata (identities, keys). Each is a libFuzzer entry
// point body; tests/fuzz/fuzz_test runs the seed corpus and a bounded, seeded mutation
// loop through them as a regular test, and tools/fuzz.sh builds them with libFuzzer.
#ifndef EONCE_TESTS_FUZZ_FUZZ_TARGETS_H_
#define EONCE_TESTS_FUZZ_FUZZ_TARGETS_H_

#include <cstddef>
#include <cstdint>

namespace eonce::fuzz {

// Each returns 0; a bug shows as a crash, a sanitizer report or a failed check (abort).
int FuzzCommand(const uint8_t* data, size_t size);
int FuzzRecord(const uint8_t* data, size_t size);
int FuzzPolicy(const uint8_t* data, size_t size);
// A slot map file (JSON, slots.proto), as a ConfigMap or an operator may write it.
int FuzzSlotMap(const uint8_t* data, size_t size);
// What a pass-through call brings in its metadata: the URIs of a certificate, the
// workload and actor it states, its idempotency key and command id (newline-separated
// fields; see fuzz_targets.cc).
int FuzzPassThrough(const uint8_t* data, size_t size);

}  // namespace eonce::fuzz

#endif  // EONCE_TESTS_FUZZ_FUZZ_TARGETS_H_
