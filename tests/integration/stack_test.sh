#!/usr/bin/env bash
# ./eonce up / status / down (tools/stack.sh) with the built binaries: up starts the stack
# and leaves it running, a producer's commands go through it, status shows them, and down
# stops exactly what up started (an unrelated ledger keeps running) and removes its data.
set -uo pipefail
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
export EONCE_BIN_DIR="$PWD"
export EONCE_STACK_DIR="$TEST_TMPDIR/stack"
stack() { bash tools/stack.sh "$@"; }
pid_of() { awk -v n="$1" '$1 == n {print $2}' "$EONCE_STACK_DIR/pids"; }

out="$(stack up)" || fail "up exits $?: $out"
agent="$(sed -n 's/^  agent *\([0-9.:]*\).*/\1/p' <<< "$out")"
[ -n "$agent" ] || fail "up printed no agent address: $out"
grep -q "example_producer --agent=$agent" <<< "$out" || fail "up printed no commands to try"
# up sends one transfer and names it: explain follows it through the running stack.
example_id="$(sed -n 's/^  \.\/eonce explain \(.*\)$/\1/p' <<< "$out")"
[ -n "$example_id" ] || fail "up printed no command to explain: $out"
sidecar="$(stack address sidecar)" || fail "address sidecar exits $?"
journey="$(tools/explain/explain --agent="$agent" --sidecar="$sidecar" "$example_id")" ||
  fail "explain exits $?: $journey"
grep -q "^verdict: applied once$" <<< "$journey" || fail "explain's verdict is not applied once: $journey"
ledger_pid="$(pid_of ledger)"

again="$(stack up)" || fail "a second up exits $?"
grep -q "already runs" <<< "$again" || fail "a second up started another stack: $again"
[ "$(pid_of ledger)" = "$ledger_pid" ] || fail "a second up replaced the ledger"

# A process up did not start, of the same binary: down must leave it alone.
services/ledger/ledger_service --listen=127.0.0.1:0 --data_dir="$TEST_TMPDIR/other" \
  > "$TEST_TMPDIR/other.out" 2>/dev/null &
other=$!

outbox_agent/example/example_producer --agent="$agent" --transfers=3 --timeout_s=30 ||
  fail "the producer's commands did not go through the stack"
status="$(stack status)" || fail "status exits $? while everything runs: $status"
[ "$(grep -c ' running ' <<< "$status")" = 3 ] || fail "status does not show three running: $status"
# Two opens and a transfer by up, three transfers here.
grep -q "ACKED 6" <<< "$status" || fail "status does not count the 6 acked commands: $status"

pids="$(awk '{print $2}' "$EONCE_STACK_DIR/pids")"
stack down > /dev/null || fail "down exits $?"
for pid in $pids; do
  kill -0 "$pid" 2>/dev/null && fail "down left pid $pid running"
done
kill -0 "$other" 2>/dev/null || fail "down stopped a process it did not start"
[ -e "$EONCE_STACK_DIR" ] && fail "down left the data folder"
grep -q "not running" <<< "$(stack status)" || fail "status after down does not say so"

stack up > /dev/null || fail "up after down exits $?"
stack down --keep-data > /dev/null
[ -d "$EONCE_STACK_DIR/ledger" ] || fail "down --keep-data removed the data"

kill "$other" 2>/dev/null
wait "$other" 2>/dev/null
echo "stack: $failures failures"
[ "$failures" = 0 ]
