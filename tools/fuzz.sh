#!/usr/bin/env bash
# Builds the libFuzzer binaries with clang (-fsanitize=fuzzer,address) and runs one:
#   tools/fuzz.sh command|record|policy|slot_map|passthrough [seconds]
# The seed corpus is tests/fuzz/corpus/<target>; new inputs go to a scratch folder.
set -euo pipefail
cd "$(dirname "$0")/.."
target="${1:-command}"
seconds="${2:-60}"
bazel build --color=no --curses=no //proto:command_cc //proto:records_cc //proto:slots_cc >/dev/null 2>&1
gen=bazel-bin/proto
out="$(mktemp -d)"
srcs=(tests/fuzz/${target}_fuzzer.cc tests/fuzz/fuzz_targets.cc common/command/command.cc common/base/hash.cc
      common/rpc/identity_uri.cc dedupe_sidecar/doors/transparent_call.cc
      common/base/status.cc common/store/ttl.cc common/store/rocks.cc dedupe_sidecar/authz/policy.cc common/coord/slots.cc
      dedupe_sidecar/store/record_store.cc "$gen/eonce/v1/command.pb.cc" "$gen/eonce/internal/records.pb.cc"
      "$gen/eonce/v1/slots.pb.cc")
clang++ -std=c++17 -O1 -g -fsanitize=fuzzer,address -I. -I"$gen" "${srcs[@]}" \
  -o "$out/${target}_fuzzer" $(pkg-config --libs protobuf rocksdb) -lcrypto \
  -labsl_status -labsl_statusor -labsl_strings -labsl_str_format_internal -labsl_cord \
  -labsl_cord_internal -labsl_cordz_info -labsl_cordz_functions -labsl_cordz_handle \
  -labsl_synchronization -labsl_time -labsl_int128 -labsl_throw_delegate \
  -labsl_raw_logging_internal -labsl_base -labsl_spinlock_wait -labsl_hash -labsl_city \
  -labsl_low_level_hash -labsl_raw_hash_set -labsl_strerror -labsl_graphcycles_internal \
  -labsl_malloc_internal -labsl_stacktrace -labsl_symbolize -labsl_debugging_internal \
  -labsl_demangle_internal -labsl_time_zone -labsl_exponential_biased -labsl_bad_optional_access
mkdir -p "$out/corpus"
cp tests/fuzz/corpus/"$target"/* "$out/corpus/"
"$out/${target}_fuzzer" -max_total_time="$seconds" -max_len=4096 "$out/corpus"
echo "fuzzer and corpus in $out"
