#!/usr/bin/env bash
# tools/room_size_check.py on a fixture tree: rooms of 600 lines pass; a .h + .cc of 601
# lines together, and a lone .cc of 601, each fail it and are named; what sits in a
# bazel-* folder is not read.
set -euo pipefail
check="$(pwd)/tools/room_size_check.py"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
lines() { for ((i = 0; i < $1; i++)); do echo "// $i"; done; }
mkdir -p "$work/app/core" "$work/bazel-out/app"
lines 300 > "$work/app/core/heart.h"
lines 300 > "$work/app/core/heart.cc"
lines 600 > "$work/app/core/alone.cc"
lines 900 > "$work/bazel-out/app/generated.cc"
python3 "$check" --root "$work" || { echo "FAIL: rooms of 600 lines refused"; exit 1; }

echo "// one more" >> "$work/app/core/heart.cc"
if out="$(python3 "$check" --root "$work")"; then
  echo "FAIL: a .h + .cc of 601 lines passed"; exit 1
fi
grep -q "app/core/heart: 601 lines" <<<"$out" || { echo "FAIL: not named: $out"; exit 1; }
grep -q "alone" <<<"$out" && { echo "FAIL: a room of 600 named: $out"; exit 1; }

echo "// one more" >> "$work/app/core/alone.cc"
out="$(python3 "$check" --root "$work" || true)"
grep -q "app/core/alone: 601 lines" <<<"$out" || { echo "FAIL: a lone .cc of 601 not named: $out"; exit 1; }
grep -q "generated" <<<"$out" && { echo "FAIL: a bazel-* folder was read: $out"; exit 1; }
echo "PASS"
