#!/usr/bin/env python3
"""Counts the test cases of a `bazel test` run: passed, failed and skipped.

Reads the run's output (the file named on the command line) for the targets it tested
and their status, then each target's JUnit XML under bazel-testlogs/. Prints every
skipped test case with its reason, every failed one, and last one line:
    N passed, N failed, N skipped
A target that failed without a failing test case in its XML (a crash, a timeout, a
build failure) counts as one failed test. Exit status: 0 when nothing failed.
"""
import glob
import os
import re
import sys
import xml.etree.ElementTree as ET

STATUS = re.compile(
    r"^(//[^ ]+)\s+(?:\(cached\) )?(PASSED|FLAKY|FAILED|TIMEOUT|NO STATUS|INCOMPLETE|"
    r"FAILED TO BUILD|SKIPPED)\b")


def latest_files(folder):
    """The XML files of the target's latest run. Bazel leaves the shard_K_of_N and
    run_K_of_N folders of earlier invocations (another --runs_per_test, another shard
    count) next to the latest ones: of the top-level test.xml, each shard set and each run
    set, only the set written last counts."""
    sets = {}
    top = os.path.join(folder, "test.xml")
    if os.path.exists(top):
        sets["top"] = [top]
    for path in glob.glob(os.path.join(folder, "*_*_of_*", "test.xml")):
        m = re.match(r"(shard|run)_\d+_of_(\d+)$", os.path.basename(os.path.dirname(path)))
        if m:
            sets.setdefault((m.group(1), m.group(2)), []).append(path)
    if not sets:
        return []
    newest = max(sets.values(), key=lambda files: max(os.path.getmtime(f) for f in files))
    return sorted(newest)


def cases_of(target):
    package, name = target[2:].split(":", 1)
    folder = os.path.join("bazel-testlogs", package, name)
    for path in latest_files(folder):
        try:
            root = ET.parse(path).getroot()
        except (ET.ParseError, OSError):
            continue
        for case in root.iter("testcase"):
            yield case


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: test_summary.py BAZEL_LOG BAZEL_EXIT_STATUS")
    with open(sys.argv[1], errors="replace") as f:
        lines = f.read().splitlines()
    bazel_status = int(sys.argv[2])
    passed = failed = skipped = 0
    for line in lines:
        m = STATUS.match(line)
        if not m:
            continue
        target, status = m.group(1), m.group(2)
        target_failed = 0
        seen = 0
        for case in cases_of(target):
            seen += 1
            label = "%s %s.%s" % (target, case.get("classname", ""), case.get("name", ""))
            if case.find("failure") is not None or case.find("error") is not None:
                target_failed += 1
                print("failed: " + label)
            elif case.get("result") == "skipped" or case.find("skipped") is not None:
                skipped += 1
                node = case.find("skipped")
                reason = (node.get("message") if node is not None else "") or ""
                reason = reason.strip().splitlines()[-1] if reason.strip() else "no reason given"
                print("skipped: %s: %s" % (label, reason))
            else:
                passed += 1
        ok = status in ("PASSED", "FLAKY")
        if not ok and target_failed == 0:
            target_failed = 1
            print("failed: %s %s" % (target, status))
        if ok and seen == 0:
            passed += 1
        failed += target_failed
    if bazel_status != 0 and failed == 0:
        failed = 1  # the build failed before any test could run
        print("failed: the build")
    print("%d passed, %d failed, %d skipped" % (passed, failed, skipped))
    return 0 if failed == 0 and bazel_status == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
