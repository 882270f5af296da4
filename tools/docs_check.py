#!/usr/bin/env python3
"""Checks that the guides say only what is true of the tree.

1. Every relative link in the Markdown files given resolves: the file exists, and a
   `#fragment` into a Markdown file names one of its headings (GitHub's anchors).
2. Every flag a guide names (`--name`, outside links) is one that some binary of the tree
   accepts (its `--helpfull`), a flag of the `eonce` script or of a Python tool of the
   tree (their usage text), or a flag of another program the guides use, listed with its
   program in the allowlist file. A bool flag may be named as `--noname`.

Usage: docs_check.py --root DIR --help_dir DIR --allow FILE [--usage FILE ...] DOC...
`--help_dir` holds one `<binary>.txt` per binary, its `--helpfull` output.
Prints each problem as `file:line: problem`, and exits 1 if there is any.
"""
import argparse
import os
import re
import sys

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FLAG = re.compile(r"(?<![\w/-])--([a-z][a-z0-9_-]*)(\*?)")
HELP_FLAG = re.compile(r"^\s*--([a-z][a-z0-9_]*)", re.M)
USAGE_FLAG = re.compile(r"--([a-z][a-z0-9_-]*)")
FENCE = re.compile(r"^\s*```")


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"`", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path, cache={}):
    if path not in cache:
        found = set()
        counts = {}
        in_fence = False
        with open(path, encoding="utf-8") as f:
            for line in f:
                if FENCE.match(line):
                    in_fence = not in_fence
                    continue
                m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
                if m and not in_fence:
                    base = slug(m.group(1))
                    n = counts.get(base, 0)
                    counts[base] = n + 1
                    found.add(base if n == 0 else f"{base}-{n}")
        cache[path] = found
    return cache[path]


def known_flags(help_dir, usages, allow_file):
    flags = set()
    for name in sorted(os.listdir(help_dir)):
        with open(os.path.join(help_dir, name), encoding="utf-8", errors="replace") as f:
            flags.update(HELP_FLAG.findall(f.read()))
    for usage in usages:
        with open(usage, encoding="utf-8") as f:
            flags.update(USAGE_FLAG.findall(f.read()))
    external = set()
    with open(allow_file, encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                # "<program>: --a --b"
                program, _, names = line.partition(":")
                if not names.strip():
                    raise SystemExit(f"{allow_file}: '{line}' names no flags for {program}")
                external.update(n.lstrip("-") for n in names.split())
    return flags, external


def check(root, docs, flags, external):
    problems = []
    for doc in docs:
        path = os.path.join(root, doc)
        in_fence = False
        with open(path, encoding="utf-8") as f:
            lines = f.readlines()
        for number, line in enumerate(lines, 1):
            if FENCE.match(line):
                in_fence = not in_fence
            for target in LINK.findall(line):
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                    continue
                file_part, _, fragment = target.partition("#")
                resolved = (os.path.normpath(os.path.join(os.path.dirname(path), file_part))
                            if file_part else path)
                if not os.path.exists(resolved):
                    problems.append(f"{doc}:{number}: link to {target}: no such file")
                elif fragment and resolved.endswith(".md") and fragment not in anchors(resolved):
                    problems.append(f"{doc}:{number}: link to {target}: no heading "
                                    f"'#{fragment}' in {os.path.relpath(resolved, root)}")
            for name, wildcard in FLAG.findall(LINK.sub("", line)):
                if wildcard:  # `--tls_*`: a family of flags, of which one must exist
                    if any(f.startswith(name) for f in flags):
                        continue
                    problems.append(f"{doc}:{number}: --{name}*: no flag of the tree "
                                    "begins so")
                    continue
                name = name.rstrip("_-")
                plain = name[2:] if name.startswith("no") else None
                if name in flags or name in external or (plain and plain in flags):
                    continue
                problems.append(f"{doc}:{number}: --{name}: no binary, script or listed "
                                "program of the tree has this flag")
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", required=True)
    parser.add_argument("--help_dir", required=True)
    parser.add_argument("--allow", required=True)
    parser.add_argument("--usage", action="append", default=[])
    parser.add_argument("docs", nargs="+")
    args = parser.parse_args()
    flags, external = known_flags(args.help_dir, args.usage, args.allow)
    if len(flags) < 20:
        print(f"only {len(flags)} flags found in {args.help_dir}: the binaries' --helpfull "
              "output is missing", file=sys.stderr)
        return 1
    problems = check(args.root, args.docs, flags, external)
    for p in problems:
        print(p)
    print(f"{len(args.docs)} documents, {len(flags)} flags of the tree: "
          f"{len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
