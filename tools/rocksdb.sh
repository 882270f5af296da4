#!/usr/bin/env bash
# Builds Debian's RocksDB source (the same 7.8.3 as librocksdb-dev, and its headers) as a
# release library into /opt/eonce/rocksdb, which //bazel:rocksdb links ahead of Debian's
# own librocksdb.a.
#
# Why: Debian builds its RocksDB with CMake's build type "None", so NDEBUG is not set: every
# write runs RocksDB's debug assertions (the memtable's skiplist checks each insert's order
# with extra key comparisons) and its test sync points. Its PORTABLE build also computes
# CRC32C in software. This build sets NDEBUG and, where the CPU of the machine that builds
# it has SSE 4.2, the hardware CRC32C (a binary built so needs SSE 4.2 where it runs).
# docs/performance-history.md ("RocksDB built for release") has the measurements.
#
# Safe to run twice: a stamp names the source and flags the library was built from, and a
# library built from the same ones is kept. Any failure (no network to deb.debian.org, a
# checksum that does not match, a compile error) leaves no half-built library behind and
# exits 0 with a note: the build then links Debian's librocksdb.a, correct but slower.
# EONCE_ROCKSDB=debian skips this build.
set -uo pipefail

VERSION=7.8.3
SHA256=b85408a374770897332bf15e51620a5f35720dd416a4749e3899057f9cfaf84d
URL="http://deb.debian.org/debian/pool/main/r/rocksdb/rocksdb_${VERSION}.orig.tar.gz"
PREFIX=/opt/eonce/rocksdb  # bazel/BUILD.bazel links from here (ROCKSDB_RELEASE_DIR)

if [ "${EONCE_ROCKSDB:-}" = "debian" ]; then
  echo "setup: EONCE_ROCKSDB=debian: linking Debian's librocksdb.a"
  exit 0
fi

sse42=OFF
if grep -qw sse4_2 /proc/cpuinfo 2>/dev/null; then sse42=ON; fi
# Debian's own flags (build type "None", hardening included) plus NDEBUG.
flags="-O2 -DNDEBUG -fstack-protector-strong -Wformat -D_FORTIFY_SOURCE=2"
stamp="rocksdb ${VERSION} sha256 ${SHA256} flags '${flags}' sse42 ${sse42}"

if [ -f "$PREFIX/lib/librocksdb.a" ] && [ "$(cat "$PREFIX/STAMP" 2>/dev/null)" = "$stamp" ]; then
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

fallback() {
  echo "setup: note: $1; linking Debian's librocksdb.a (built without NDEBUG: slower)" >&2
  exit 0
}

echo "setup: building RocksDB ${VERSION} for release (NDEBUG, SSE 4.2 ${sse42}); a few minutes"
curl -fsS --max-time 300 -o "$work/src.tar.gz" "$URL" || fallback "could not fetch $URL"
echo "${SHA256}  $work/src.tar.gz" | sha256sum -c --quiet - || fallback "checksum mismatch"
tar -xzf "$work/src.tar.gz" -C "$work" || fallback "could not unpack the source"
src="$work/rocksdb-${VERSION}"
cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=None \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_C_FLAGS="$flags" \
  -DPORTABLE=ON -DFORCE_SSE42="$sse42" -DROCKSDB_BUILD_SHARED=OFF -DWITH_GFLAGS=OFF \
  -DWITH_TESTS=OFF -DWITH_BENCHMARK_TOOLS=OFF -DWITH_CORE_TOOLS=OFF -DWITH_TOOLS=OFF \
  -DWITH_BZ2=ON -DWITH_LZ4=ON -DWITH_ZLIB=ON -DWITH_ZSTD=ON -DWITH_SNAPPY=ON \
  -DFAIL_ON_WARNINGS=OFF >"$work/cmake.log" 2>&1 ||
  fallback "cmake failed ($(tail -1 "$work/cmake.log"))"
make -C "$work/build" -j"$(nproc)" rocksdb >"$work/make.log" 2>&1 ||
  fallback "the build failed ($(tail -1 "$work/make.log"))"

# Installed whole or not at all: the new tree is complete before the old one is removed
# and the new one renamed into its place.
$SUDO mkdir -p "$(dirname "$PREFIX")" || fallback "cannot create $(dirname "$PREFIX")"
$SUDO rm -rf "$PREFIX.new"
$SUDO mkdir -p "$PREFIX.new/lib" &&
  $SUDO cp "$work/build/librocksdb.a" "$PREFIX.new/lib/" &&
  echo "$stamp" | $SUDO tee "$PREFIX.new/STAMP" >/dev/null &&
  $SUDO rm -rf "$PREFIX" && $SUDO mv "$PREFIX.new" "$PREFIX" ||
  fallback "could not install into $PREFIX"
echo "setup: RocksDB ${VERSION} for release in $PREFIX"

# Bazel does not see a library outside the workspace change: binaries it linked before
# would keep the old one. Its outputs are dropped, so the next build links the new one.
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ -e "$root/bazel-bin" ]; then
  echo "setup: bazel clean, so that every binary links the new RocksDB"
  (cd "$root" && bazel clean) || echo "setup: note: run 'bazel clean' before the next build" >&2
fi
