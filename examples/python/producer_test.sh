#!/usr/bin/env bash
# The Python producer against the real binaries (tools/stack.sh starts the ledger, its
# sidecar and an agent): its commands apply once, its projection matches the ledger, a
# business rejection is decoded from the standard error details, and a full outbox's
# RESOURCE_EXHAUSTED is read with its ErrorInfo and RetryInfo. Its W3C trace id shows up in
# the agent's, the sidecar's and the ledger's log lines.
set -uo pipefail
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
PY=/usr/bin/python3
if ! "$PY" -c "import grpc, google.protobuf" 2>/dev/null; then
  echo "python3-grpcio and python3-protobuf are required (tools/setup.sh installs them)" >&2
  exit 1
fi
export EONCE_BIN_DIR="$PWD"
export EONCE_STACK_DIR="$TEST_TMPDIR/stack"
stubs="$PWD/examples/python/gen"
trap 'bash tools/stack.sh down >/dev/null 2>&1; [ -n "${full_agent:-}" ] && kill "$full_agent" 2>/dev/null' EXIT

bash tools/stack.sh up > "$TEST_TMPDIR/up.txt" || { cat "$TEST_TMPDIR/up.txt"; exit 1; }
agent="$(sed -n 's/.* listening on //p' "$EONCE_STACK_DIR/agent.out")"
ledger="$(sed -n 's/.* listening on //p' "$EONCE_STACK_DIR/ledger.out")"

out="$(timeout 120 "$PY" examples/python/producer.py --agent="$agent" --transfers=4 \
        --stubs="$stubs" --timeout_s=60 2>&1)" || fail "the producer exits $?: $out"
echo "$out"
grep -q "outcomes: acked 6, rejected 1 (INSUFFICIENT_FUNDS), pending 0" <<< "$out" ||
  fail "not every outcome came back as expected"
grep -q "projection: py-a=996 py-b=4" <<< "$out" || fail "the projection is wrong"
trace="$(sed -n 's/^trace: \([0-9a-f]\{32\}\)$/\1/p' <<< "$out")"
[ -n "$trace" ] || fail "the producer named no trace id"
for log in agent sidecar ledger; do
  grep -q "\"trace_id\":\"$trace\"" "$EONCE_STACK_DIR/$log.log" ||
    fail "the $log's log has no line with trace id $trace"
done

# Again, the same accounts: the opens carry fixed command ids and are not applied twice.
out="$(timeout 120 "$PY" examples/python/producer.py --agent="$agent" --transfers=4 \
        --stubs="$stubs" --timeout_s=60 2>&1)" || fail "the second run exits $?: $out"
balances="$("$PY" - "$ledger" "$stubs" <<'PY'
import sys
sys.path.insert(0, sys.argv[2])
import grpc
from eonce.ledger.v1 import ledger_pb2, ledger_pb2_grpc
stub = ledger_pb2_grpc.LedgerStub(grpc.insecure_channel(sys.argv[1]))
for account in ("py-a", "py-b"):
    got = stub.GetAccount(ledger_pb2.GetAccountRequest(id=account), timeout=5,
                          metadata=[("eonce-component", "checker"), ("eonce-tenant", "acme")])
    print(f"{account}={got.balance}", end=" ")
PY
)"
[ "$balances" = "py-a=992 py-b=8 " ] || fail "the ledger holds '$balances', not py-a=992 py-b=8"

# A full outbox: an agent whose sidecar is unreachable keeps its records waiting.
services_dir="$TEST_TMPDIR/full"
mkdir -p "$services_dir"
outbox_agent/outbox_agent --listen=127.0.0.1:0 --data_dir="$services_dir/agent" --tenant=acme \
  --sidecar=127.0.0.1:1 --max_pending_records=2 > "$services_dir/agent.out" 2> "$services_dir/agent.log" &
full_agent=$!
for _ in $(seq 1 200); do
  full="$(sed -n 's/.* listening on //p' "$services_dir/agent.out")"
  [ -n "$full" ] && break
  sleep 0.1
done
[ -n "$full" ] || fail "the second agent did not start: $(tail -3 "$services_dir/agent.log")"
out="$(timeout 120 "$PY" examples/python/producer.py --agent="$full" --transfers=1 \
        --stubs="$stubs" --timeout_s=10 2>&1)"
code=$?
[ "$code" != 0 ] || fail "the producer succeeded against a full outbox"
grep -q "RESOURCE_EXHAUSTED OUTBOX_FULL (retry after 1000 ms); retrying" <<< "$out" ||
  fail "the retry hint was not read from the standard details: $out"
grep -q "gave up on .*: RESOURCE_EXHAUSTED OUTBOX_FULL" <<< "$out" ||
  fail "the producer did not give up naming the reason: $out"

echo "python producer: $failures failures"
[ "$failures" = 0 ]
