#!/usr/bin/env bash
# Runs tools/docs_check.py over every guide of the tree, with the --helpfull of each
# binary given as an argument.
set -euo pipefail
# The source tree: links may point at any file of it (the test is tagged local).
root="$(dirname "$(readlink -f eonce)")"
help_dir="$(mktemp -d)"
trap 'rm -rf "$help_dir"' EXIT
for binary in "$@"; do
  # absl's --helpfull exits 1 after printing; only an empty output is a problem.
  "$binary" --helpfull > "$help_dir/$(basename "$binary").txt" 2>&1 || true
  if [ ! -s "$help_dir/$(basename "$binary").txt" ]; then
    echo "FAIL: $binary --helpfull printed nothing"; exit 1
  fi
done
cd "$root"
mapfile -t docs < <(git ls-files '*.md' 2>/dev/null | grep -v -e node_modules -e '^bench/results/' ||
                    find . -name '*.md' -not -path './bazel-*' -not -path '*/node_modules/*' \
                      -not -path './bench/results/*' | sed 's|^\./||')
python3 tools/docs_check.py --root "$root" --help_dir "$help_dir" \
  --allow tests/docs/external_flags.txt \
  --usage eonce --usage bench/peers.py --usage bench/targets.py \
  --usage examples/python/producer.py "${docs[@]}"
