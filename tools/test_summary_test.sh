#!/usr/bin/env bash
# The suite's counter (tools/test_summary.py) counts only a target's latest run: a failed
# run left by an earlier --runs_per_test must not fail the suite, and a failure in the
# latest run must. Builds fake bazel-testlogs folders in a temporary directory.
set -euo pipefail
summary="$(cd "$(dirname "$0")" && pwd)/test_summary.py"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"

xml() {  # xml FILE FAILED(0|1) NAME
  mkdir -p "$(dirname "$1")"
  if [ "$2" = 1 ]; then
    body="<testcase classname=\"T\" name=\"$3\"><failure message=\"boom\"/></testcase>"
  else
    body="<testcase classname=\"T\" name=\"$3\"/>"
  fi
  echo "<testsuites><testsuite>$body</testsuite></testsuites>" > "$1"
}

logs=bazel-testlogs/pkg/t
xml "$logs/run_1_of_2/test.xml" 1 stale_a
xml "$logs/run_2_of_2/test.xml" 1 stale_b
touch -d "2 hours ago" "$logs"/run_*/test.xml
xml "$logs/test.xml" 0 latest
echo "//pkg:t                                  (cached) PASSED in 1.0s" > run.log

out="$(python3 "$summary" run.log 0 || true)"
echo "$out"
[ "$(echo "$out" | tail -1)" = "1 passed, 0 failed, 0 skipped" ] || {
  echo "FAIL: stale runs were counted"; exit 1; }

# The negative control: the latest run failed, and it is counted.
xml "$logs/test.xml" 1 latest
set +e
out="$(python3 "$summary" run.log 3)"
status=$?
set -e
echo "$out"
[ "$status" -ne 0 ] && [ "$(echo "$out" | tail -1)" = "0 passed, 1 failed, 0 skipped" ] || {
  echo "FAIL: the latest run's failure was not counted"; exit 1; }

# Shards of the latest run all count.
rm -rf "$logs"
xml "$logs/shard_1_of_2/test.xml" 0 s1
xml "$logs/shard_2_of_2/test.xml" 0 s2
out="$(python3 "$summary" run.log 0 || true)"
[ "$(echo "$out" | tail -1)" = "2 passed, 0 failed, 0 skipped" ] || {
  echo "FAIL: shards not counted: $out"; exit 1; }
echo PASS
