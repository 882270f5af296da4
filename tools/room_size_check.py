#!/usr/bin/env python3
"""Checks that no room of the tree is over its line limit.

A room is the .h and the .cc of one name in one folder (foo.h with foo.cc), or either
alone; its size is the lines of both together. A room over the limit most often holds more
than one concern, and is split by concern, not by line count.

Usage: room_size_check.py --root DIR [--limit N]
Prints one line per room over the limit, largest first, and exits 1 if there is any.
"""
import argparse
import collections
import os
import sys

SKIP_DIRS = {".git", "node_modules", "bazel"}
EXTENSIONS = (".h", ".cc")


def rooms(root):
    sizes = collections.Counter()
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith("bazel-"))
        for name in files:
            stem, ext = os.path.splitext(name)
            if ext not in EXTENSIONS:
                continue
            path = os.path.join(folder, name)
            with open(path, encoding="utf-8", errors="replace") as f:
                lines = sum(1 for _ in f)
            sizes[os.path.relpath(os.path.join(folder, stem), root)] += lines
    return sizes


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", required=True)
    parser.add_argument("--limit", type=int, default=600)
    args = parser.parse_args()
    over = [(size, room) for room, size in rooms(args.root).items() if size > args.limit]
    for size, room in sorted(over, reverse=True):
        print(f"{room}: {size} lines (.h + .cc) over the limit of {args.limit}; "
              "split it by concern")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
