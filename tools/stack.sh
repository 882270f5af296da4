#!/usr/bin/env bash
# The local stack, left running: the ledger behind its dedupe sidecar, and an outbox
# agent for tenant acme, on loopback ports, with their data in one folder.
#
#   tools/stack.sh up       start it in the background (or show it, if it runs)
#   tools/stack.sh status   what runs, and the outbox's records by state
#   tools/stack.sh address NAME   the address a running component listens on
#   tools/stack.sh down     stop exactly what `up` started, then delete its data folder
#                           (--keep-data keeps it)
#
# EONCE_BIN_DIR: where the built binaries are (default: bazel-bin of this checkout).
# EONCE_STACK_DIR: the stack's folder (default: .stack in this checkout).
# Development mode: plaintext on 127.0.0.1, identities from headers (docs/operations.md,
# "What starts where"); the ledger admits the sidecar, which says it is one.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${EONCE_BIN_DIR:-$ROOT/bazel-bin}"
DIR="${EONCE_STACK_DIR:-$ROOT/.stack}"
PIDS="$DIR/pids"

# The components, in start order: name, binary, and its flags (ADDR_<name> filled in).
components=(ledger sidecar agent)

binary() {
  case "$1" in
    ledger) echo "$BIN/services/ledger/ledger_service" ;;
    sidecar) echo "$BIN/dedupe_sidecar/dedupe_sidecar" ;;
    agent) echo "$BIN/outbox_agent/outbox_agent" ;;
  esac
}

flags() {
  case "$1" in
    ledger) echo "--listen=127.0.0.1:0 --data_dir=$DIR/ledger --drain_ms=2000" ;;
    sidecar) echo "--listen=127.0.0.1:0 --data_dir=$DIR/sidecar --upstream=$(address ledger) --drain_ms=2000" ;;
    agent) echo "--listen=127.0.0.1:0 --data_dir=$DIR/agent --tenant=acme --sidecar=$(address sidecar) --drain_ms=2000" ;;
  esac
}

# The address a component printed when it started ("NAME listening on HOST:PORT").
address() {
  sed -n 's/.* listening on \(.*\)$/\1/p' "$DIR/$1.out" 2>/dev/null | head -1
}

# The pid `up` recorded for a component, if that process still runs.
running_pid() {
  local pid
  pid="$(awk -v n="$1" '$1 == n {print $2}' "$PIDS" 2>/dev/null)"
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && echo "$pid"
  return 0
}

start() {
  local name="$1" bin
  bin="$(binary "$name")"
  [ -x "$bin" ] || { echo "stack: $bin is not built (./eonce build)" >&2; exit 1; }
  mkdir -p "$DIR"
  # A session of its own, so the component outlives this shell and its signals; the
  # inner shell records its own pid, then becomes the component.
  rm -f "$DIR/$name.pid"
  # shellcheck disable=SC2046
  setsid -f bash -c 'echo $$ > "$0"; exec "$@"' "$DIR/$name.pid" "$bin" $(flags "$name") \
    > "$DIR/$name.out" 2> "$DIR/$name.log" < /dev/null
  local pid=""
  for _ in $(seq 1 50); do
    pid="$(cat "$DIR/$name.pid" 2>/dev/null || true)"
    [ -n "$pid" ] && break
    sleep 0.1
  done
  echo "$name $pid" >> "$PIDS"
  for _ in $(seq 1 200); do  # at most 20 s
    [ -n "$(address "$name")" ] && return 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "stack: $name did not start; its log ($DIR/$name.log) ends:" >&2
  tail -5 "$DIR/$name.log" >&2
  down_all >/dev/null
  exit 1
}

show() {
  local agent sidecar ledger
  agent="$(address agent)" sidecar="$(address sidecar)" ledger="$(address ledger)"
  cat <<EOF
eonce stack (tenant acme, plaintext, data in $DIR)
  ledger   $ledger      log $DIR/ledger.log
  sidecar  $sidecar      log $DIR/sidecar.log
  agent    $agent      log $DIR/agent.log

Try:
  $BIN/outbox_agent/example/example_producer --agent=$agent --transfers=5
  python3 $ROOT/examples/python/producer.py --agent=$agent --transfers=5
  $BIN/outbox_agent/outboxctl --agent=$agent stats
  $BIN/outbox_agent/outboxctl --agent=$agent list ACKED
  $BIN/dedupe_sidecar/sidecarctl --sidecar=$sidecar --tenant=acme --operator_name=oncall parked
  $BIN/services/inbox/effectsctl --service=$ledger --operator_name=oncall --counts
  ./eonce status
  ./eonce down
EOF
  local id
  id="$(cat "$DIR/example_id" 2>/dev/null || true)"
  if [ -n "$id" ]; then
    cat <<EOF

A transfer the example producer just sent; its journey through agent, sidecar and ledger:
  ./eonce explain $id
EOF
  fi
}

# One transfer through the fresh stack, so that `up` can name a command to explain.
example() {
  local producer="$BIN/outbox_agent/example/example_producer" out
  [ -x "$producer" ] || return 0
  out="$("$producer" --agent="$(address agent)" --transfers=1 --timeout_s=20 2>/dev/null)" || return 0
  sed -n 's/^last transfer \(.*\)$/\1/p' <<< "$out" > "$DIR/example_id"
}

up() {
  if [ -n "$(running_pid agent)" ]; then
    echo "the stack already runs"
    show
    return 0
  fi
  [ -f "$PIDS" ] && down_all >/dev/null
  mkdir -p "$DIR"
  : > "$PIDS"
  for name in "${components[@]}"; do start "$name"; done
  example
  show
}

status() {
  if [ ! -f "$PIDS" ]; then
    echo "the stack is not running (./eonce up starts it)"
    return 0
  fi
  local up=0
  for name in "${components[@]}"; do
    local pid
    pid="$(running_pid "$name")"
    if [ -n "$pid" ]; then
      printf '  %-8s running  pid %-7s %s\n' "$name" "$pid" "$(address "$name")"
      up=$((up + 1))
    else
      printf '  %-8s stopped\n' "$name"
    fi
  done
  if [ -n "$(running_pid agent)" ]; then
    echo "outbox records by state:"
    "$BIN/outbox_agent/outboxctl" --agent="$(address agent)" stats | sed 's/^/  /'
  fi
  [ "$up" = "${#components[@]}" ]
}

# Stops the recorded processes, the last started first; waits for each to drain.
down_all() {
  [ -f "$PIDS" ] || return 0
  for (( i=${#components[@]}-1; i>=0; i-- )); do
    local name="${components[$i]}" pid
    pid="$(running_pid "$name")"
    [ -n "$pid" ] || continue
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 150); do  # at most 15 s
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
    echo "  $name stopped"
  done
  rm -f "$PIDS"
}

down() {
  if [ ! -f "$PIDS" ]; then
    echo "the stack is not running"
  else
    down_all
  fi
  if [ "${1:-}" = "--keep-data" ]; then
    echo "data kept in $DIR"
  else
    rm -rf "$DIR"
  fi
}

case "${1:-}" in
  up) up ;;
  status) status ;;
  down) shift; down "$@" ;;
  address) [ -n "$(running_pid "${2:-}")" ] && address "${2:-}" ;;
  *) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
