#!/usr/bin/env bash
# Which RocksDB the build linked. Where tools/rocksdb.sh installed its release library,
# the binaries must carry it, not Debian's librocksdb.a: Debian's is built without NDEBUG,
# so its objects call RocksDB's test sync points, and the release build has none.
set -euo pipefail
probe="$1"
release_dir="$2"
stamp="$release_dir/STAMP"
"$probe" "${TEST_TMPDIR:-$(mktemp -d)}/db"
debug_symbols="$(nm -C "$probe" | grep -c 'rocksdb::SyncPoint::' || true)"
if [ ! -f "$stamp" ]; then
  echo "SKIP: tools/rocksdb.sh has not installed a release RocksDB here; linked Debian's" \
    "librocksdb.a ($debug_symbols sync point symbols)" >&2
  exit 0
fi
if [ "$debug_symbols" -ne 0 ]; then
  echo "FAIL: $release_dir holds a release RocksDB ($(cat "$stamp"))," \
    "but the binary links one built without NDEBUG ($debug_symbols sync point symbols)" >&2
  exit 1
fi
echo "linked: $(cat "$stamp")"
