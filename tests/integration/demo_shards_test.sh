#!/usr/bin/env bash
# ./eonce demo --shards 3, as a test: the summary must show every command final and
# applied at most once, money conserved, one slot move finished and transfers across
# shards. A summary that breaks any of these fails the test (the checks are checked
# against a doctored line below).
set -euo pipefail
out="${TEST_TMPDIR:-/tmp}/demo.out"
tools/demo/demo --bin_dir=. --shards=3 --commands=400 --quiet > "$out" 2>&1 || {
  cat "$out"; echo "FAIL: the demo exited non-zero" >&2; exit 1; }
summary="$(grep '^summary: ' "$out")"
echo "$summary"
check() {
  local line="$1"
  for want in "lost=0" "duplicate_effects=0" "ledger_conserved=true" "reshards=1"; do
    grep -q " $want\b" <<< "$line" || { echo "missing $want"; return 1; }
  done
  local cross
  cross="$(sed -n 's/.* cross_shard=\([0-9]*\).*/\1/p' <<< "$line")"
  [ "${cross:-0}" -gt 0 ] || { echo "no transfer across shards"; return 1; }
}
check "$summary" || { cat "$out"; exit 1; }
# The checks can fail: a second effect, or a move that did not happen, is caught.
if check "${summary/duplicate_effects=0/duplicate_effects=1}" > /dev/null; then
  echo "FAIL: the check accepted a duplicate effect" >&2; exit 1
fi
if check "${summary/reshards=1/reshards=0}" > /dev/null; then
  echo "FAIL: the check accepted a run without a move" >&2; exit 1
fi
echo "PASS"
