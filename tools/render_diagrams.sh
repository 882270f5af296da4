#!/usr/bin/env bash
# Renders every docs/*.dot to the .svg beside it with Graphviz's `dot` (tools/setup.sh
# installs it). Run after editing a diagram and commit both files: tests/docs:diagrams_test
# fails when a checked-in .svg is not what `dot` renders from its .dot.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
command -v dot >/dev/null 2>&1 || {
  echo "render_diagrams: Graphviz's dot not found (tools/setup.sh installs it)" >&2; exit 1; }
shopt -s nullglob
for source in "$root"/docs/*.dot; do
  dot -Tsvg "$source" -o "${source%.dot}.svg"
  echo "rendered ${source#"$root"/} -> $(basename "${source%.dot}.svg")"
done
