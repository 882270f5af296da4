#!/usr/bin/env bash
# Runs tools/room_size_check.py over the source tree: no .h + .cc of one name over 600 lines.
set -euo pipefail
check="$(pwd)/tools/room_size_check.py"
root="$(dirname "$(readlink -f eonce)")"
python3 "$check" --root "$root"
