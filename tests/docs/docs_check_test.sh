#!/usr/bin/env bash
# tools/docs_check.py on fixtures: a clean guide passes; a broken link, a link to a
# heading that is not there, an unknown flag and an unknown flag family each fail it.
set -euo pipefail
check="$(pwd)/tools/docs_check.py"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/help" "$work/docs"
printf '  --listen (where to listen)\n  --tls_cert (a file)\n  --faults (bool)\n' > "$work/help/bin.txt"
for i in $(seq 1 20); do echo "  --filler_$i (x)" >> "$work/help/bin.txt"; done
echo "tool: --write-out" > "$work/allow.txt"
cat > "$work/docs/guide.md" <<'MD'
# Guide
## Mutual TLS and tenants
See [the other](other.md#a-heading) and [here](#mutual-tls-and-tenants).
Run with `--listen=:1`, `--tls_*`, `--nofaults`, `tool --write-out=json`.
```
# not a heading
```
MD
printf '# Other\n## A heading\n' > "$work/docs/other.md"

run() { python3 "$check" --root "$work" --help_dir "$work/help" --allow "$work/allow.txt" "$@"; }
run docs/guide.md docs/other.md || { echo "FAIL: a clean guide was refused"; exit 1; }

expect_problem() {  # expect_problem LINE_TO_ADD PATTERN
  cp "$work/docs/guide.md" "$work/guide.orig"
  echo "$1" >> "$work/docs/guide.md"
  set +e
  out="$(run docs/guide.md docs/other.md)"
  status=$?
  set -e
  mv "$work/guide.orig" "$work/docs/guide.md"
  echo "$out"
  [ "$status" -ne 0 ] && echo "$out" | grep -q -- "$2" || {
    echo "FAIL: '$1' was not caught"; exit 1; }
}
expect_problem "[gone](missing.md)" "no such file"
expect_problem "[gone](other.md#no-such-heading)" "no heading '#no-such-heading'"
expect_problem "[gone](#not-a-heading)" "no heading '#not-a-heading'"
expect_problem "Set \`--listen_port=1\`." "listen_port: no binary"
expect_problem "The \`--etcd_*\` flags." "etcd_\*: no flag of the tree"
echo "PASS"
