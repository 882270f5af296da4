#!/usr/bin/env bash
# Runs tools/layering_check.py over the source tree.
set -euo pipefail
check="$(pwd)/tools/layering_check.py"
root="$(dirname "$(readlink -f eonce)")"
python3 "$check" --root "$root"
