#!/usr/bin/env python3
"""Checks that every #include respects the architecture stated in the BUILD files.

Bazel refuses a dependency on a target that is not visible, but not an #include of a
header that arrives through another target's dependencies. This check closes that gap:
a file may include a header of another eonce package only if that header's target is
visible to the file's package. It also checks the layers of common/ (a lower layer never
includes a higher one) and that common/ includes no component.

Usage: layering_check.py --root DIR
Prints one line per violation and exits 1 if there is any.
"""
import argparse
import os
import re
import sys

# The layers of common/, lowest first: what each may include besides itself.
COMMON_LAYERS = {
    "common/base": [],
    "common/command": ["common/base"],
    "common/store": ["common/base"],
    "common/rpc": ["common/base", "common/command"],
    "common/coord": ["common/base", "common/command", "common/store", "common/rpc"],
}
COMPONENTS = ("dedupe_sidecar", "outbox_agent", "services", "tools", "bench", "tests", "examples")
# Packages whose headers are checked: the split packages and their subpackages.
CHECKED_ROOTS = tuple(
    os.environ.get("LAYERING_CHECKED_ROOTS", "common dedupe_sidecar outbox_agent").split())
SKIP_DIRS = {".git", "node_modules", "bazel"}

_BLOCK = re.compile(r"^(cc_library|cc_test|cc_binary)\((.*?)^\)", re.S | re.M)
_LIST = r"{} = \[(.*?)\]"


def _strings(text):
    return re.findall(r'"([^"]+)"', text)


def read_package(root, pkg):
    """Returns {header file name: visibility list} for the package's BUILD file."""
    path = os.path.join(root, pkg, "BUILD.bazel")
    if not os.path.exists(path):
        return None
    text = open(path).read()
    m = re.search(r"package\(\s*default_visibility\s*=\s*\[(.*?)\]", text, re.S)
    default = _strings(m.group(1)) if m else ["//visibility:private"]
    headers = {}
    for block in _BLOCK.finditer(text):
        body = block.group(2)
        vis = re.search(_LIST.format("visibility"), body, re.S)
        visibility = _strings(vis.group(1)) if vis else default
        for attr in ("hdrs", "srcs"):
            files = re.search(_LIST.format(attr), body, re.S)
            if files:
                for f in _strings(files.group(1)):
                    if f.endswith(".h"):
                        headers[f] = visibility
    return headers


def visible(visibility, here, owner):
    if here == owner:
        return True
    for v in visibility:
        if v == "//visibility:public":
            return True
        label_pkg, _, what = v[2:].partition(":")
        if what == "__pkg__" and here == label_pkg:
            return True
        if what == "__subpackages__" and (here == label_pkg or here.startswith(label_pkg + "/")):
            return True
    return False


def source_files(root):
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("bazel-"))
        for name in sorted(filenames):
            if name.endswith((".cc", ".h")):
                yield os.path.relpath(os.path.join(dirpath, name), root)


def package_of(root, rel):
    """The nearest directory above `rel` that has a BUILD.bazel."""
    d = os.path.dirname(rel)
    while d and not os.path.exists(os.path.join(root, d, "BUILD.bazel")):
        d = os.path.dirname(d)
    return d


def check(root):
    problems = []
    packages = {}
    for rel in source_files(root):
        here = package_of(root, rel)
        for n, line in enumerate(open(os.path.join(root, rel), errors="replace"), 1):
            m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
            if not m:
                continue
            inc = m.group(1)
            if not inc.startswith(tuple(r + "/" for r in CHECKED_ROOTS)):
                continue
            owner = os.path.dirname(inc)
            where = f"{rel}:{n}"
            if here.startswith("common"):
                top = here if here in COMMON_LAYERS else None
                if not owner.startswith("common"):
                    problems.append(f"{where}: common/ includes a component: {inc}")
                    continue
                if top and owner != top and owner not in COMMON_LAYERS[top]:
                    problems.append(f"{where}: {top} is below {owner} and may not include {inc}")
                    continue
            if owner not in packages:
                packages[owner] = read_package(root, owner)
            headers = packages[owner]
            if headers is None:
                problems.append(f"{where}: {inc} is in no package")
                continue
            name = os.path.basename(inc)
            if name not in headers:
                problems.append(f"{where}: {inc} belongs to no target of //{owner}")
                continue
            if not visible(headers[name], here, owner):
                problems.append(f"{where}: //{here} may not include {inc} (not visible from it)")
    return problems


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", required=True)
    args = parser.parse_args()
    problems = check(args.root)
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} include(s) cross the architecture", file=sys.stderr)
        return 1
    print("layering: every include respects the packages' visibility and common/'s layers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
