#!/usr/bin/env bash
# tools/layering_check.py on a fixture tree: a clean tree passes; a header included past
# its target's visibility, a lower layer of common/ including a higher one, and common/
# including a component each fail it.
set -euo pipefail
check="$(pwd)/tools/layering_check.py"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/common/base" "$work/common/rpc" "$work/app/core" "$work/app/doors" "$work/app/store"
cat > "$work/common/base/BUILD.bazel" <<'B'
package(default_visibility = ["//visibility:public"])
cc_library(
    name = "log",
    hdrs = ["log.h"],
)
B
cat > "$work/common/rpc/BUILD.bazel" <<'B'
package(default_visibility = ["//visibility:public"])
cc_library(
    name = "tls",
    hdrs = ["tls.h"],
)
B
cat > "$work/app/core/BUILD.bazel" <<'B'
package(default_visibility = ["//app/doors:__pkg__"])
cc_library(
    name = "heart",
    hdrs = ["heart.h"],
)
cc_library(
    name = "internal",
    hdrs = ["internal.h"],
    visibility = ["//tests:__subpackages__"],
)
B
printf 'package(default_visibility = ["//app:__subpackages__"])\n' > "$work/app/doors/BUILD.bazel"
printf 'package(default_visibility = ["//app:__subpackages__"])\n' > "$work/app/store/BUILD.bazel"
echo '#include "common/base/log.h"' > "$work/common/rpc/tls.h"
touch "$work/common/base/log.h" "$work/app/core/internal.h"
printf '#include "app/core/internal.h"\n#include "common/rpc/tls.h"\n' > "$work/app/core/heart.h"
echo '#include "app/core/heart.h"' > "$work/app/doors/door.cc"
touch "$work/app/store/store.cc"

run() { python3 "$check" --root "$work"; }
# The fixture's component is checked like the real ones.
export LAYERING_CHECKED_ROOTS="common app"
run || { echo "FAIL: a clean tree was refused"; exit 1; }

expect_problem() {  # expect_problem FILE LINE PATTERN
  cp "$work/$1" "$work/orig"
  echo "$2" >> "$work/$1"
  set +e
  out="$(run)"
  status=$?
  set -e
  mv "$work/orig" "$work/$1"
  echo "$out"
  [ "$status" -ne 0 ] && echo "$out" | grep -q -- "$3" || {
    echo "FAIL: '$2' in $1 was not caught"; exit 1; }
}
expect_problem app/doors/door.cc '#include "app/core/internal.h"' "may not include app/core/internal.h"
expect_problem app/store/store.cc '#include "app/core/heart.h"' "//app/store may not include"
expect_problem common/base/log.h '#include "common/rpc/tls.h"' "common/base is below common/rpc"
expect_problem common/rpc/tls.h '#include "app/core/heart.h"' "common/ includes a component"
expect_problem app/doors/door.cc '#include "app/core/gone.h"' "belongs to no target"
echo "PASS"
