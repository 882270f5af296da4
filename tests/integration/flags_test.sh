#!/usr/bin/env bash
# Every binary and command-line tool: --help lists that program's own flags with their
# defaults (and, for servers, their environment variables) and exits 0; an unknown flag
# or a bad value, on the command line or in the environment, exits 2 naming the flag.
set -uo pipefail
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# binary | a flag of its own | a bad value for one of its flags | server (reads EONCE_*)
programs=(
  "dedupe_sidecar/dedupe_sidecar|upstream|--drain_ms=soon|yes"
  "outbox_agent/outbox_agent|tenant|--drain_ms=soon|yes"
  "services/ledger/ledger_service|inbox_retention_ms|--drain_ms=soon|yes"
  "services/case/case_service|legacy|--drain_ms=soon|yes"
  "dedupe_sidecar/sidecarctl|operator_name|--applied=maybe|no"
  "outbox_agent/outboxctl|agent|--epoch=two|no"
  "services/inbox/effectsctl|service|--after=-1|no"
  "outbox_agent/example/example_producer|transfers|--transfers=many|no"
  "tools/demo/demo|commands|--commands=all|no"
  "tools/reshard/reshard|slots|--drain_timeout_ms=long|no"
  "tools/explain/explain|sidecar|--timeout_ms=long|no"
  "bench/bench|records|--seconds=long|no"
  "tests/sim/sim_main|seeds|--seeds=lots|no"
)
for entry in "${programs[@]}"; do
  IFS='|' read -r binary own bad server <<< "$entry"
  name="$(basename "$binary")"
  [ -x "$binary" ] || { fail "$binary is not built"; continue; }

  help="$("$binary" --help 2>&1)"; code=$?
  [ "$code" = 0 ] || fail "$name --help exits $code"
  grep -q -- "^Usage: " <<< "$help" || fail "$name --help prints no usage line"
  grep -q -- "  --$own=" <<< "$help" || fail "$name --help does not list --$own"
  grep -q -- "--flagfile\|--fromenv\|No flags matched" <<< "$help" &&
    fail "$name --help lists flags that are not its own"
  if [ "$server" = yes ]; then
    env_name="EONCE_$(tr '[:lower:]' '[:upper:]' <<< "$own")"
    grep -q -- "\[$env_name\]" <<< "$help" || fail "$name --help does not name $env_name"
  fi

  flag="${bad%%=*}"; flag="${flag#--}"
  out="$("$binary" "$bad" 2>&1)"; code=$?
  [ "$code" = 2 ] || fail "$name $bad exits $code, not 2"
  grep -q -- "--$flag" <<< "$out" || fail "$name $bad: the message does not name --$flag: $out"

  out="$("$binary" --no_such_flag=1 2>&1)"; code=$?
  [ "$code" = 2 ] || fail "$name --no_such_flag exits $code, not 2"
  grep -q -- "no_such_flag" <<< "$out" || fail "$name --no_such_flag: the message does not name it"

  if [ "$server" = yes ]; then
    env_name="EONCE_$(tr '[:lower:]' '[:upper:]' <<< "$flag")"
    out="$(env "$env_name=${bad#*=}" "$binary" 2>&1)"; code=$?
    [ "$code" = 2 ] || fail "$name with $env_name=${bad#*=} exits $code, not 2"
    grep -q -- "$flag" <<< "$out" || fail "$name with a bad $env_name: the message does not name it"
  fi
done
# Secure by default: a server refuses an address other hosts can reach without mutual TLS
# or --insecure, before it touches its data: exit 2 and one line that names the address's
# flag, --insecure and the TLS flags. (tests/security/insecure_test: the servers in
# process, the warning and the eonce_insecure gauge with --insecure.)
sockets="$(mktemp -d /tmp/eonce-flags-XXXXXX)"
data="${TEST_TMPDIR:-$sockets}/refusals"
mkdir -p "$data"
# binary | the flag named | its arguments
refusals=(
  "dedupe_sidecar/dedupe_sidecar|listen=0.0.0.0:7100|--upstream=127.0.0.1:1"  # no --listen at all
  "dedupe_sidecar/dedupe_sidecar|listen=0.0.0.0:0|--listen=0.0.0.0:0 --upstream=127.0.0.1:1"
  "outbox_agent/outbox_agent|listen=0.0.0.0:0|--listen=0.0.0.0:0 --tenant=acme"
  "services/ledger/ledger_service|listen=0.0.0.0:0|--listen=0.0.0.0:0"
  "services/case/case_service|listen=[::]:0|--listen=[::]:0"
  "services/ledger/ledger_service|sidecar_listen=0.0.0.0:0|--listen=unix:$sockets/ledger.sock --sidecar_listen=0.0.0.0:0 --sidecar_data_dir=$data/embedded-sidecar"
)
n=0
for entry in "${refusals[@]}"; do
  IFS='|' read -r binary named args <<< "$entry"
  n=$((n + 1))
  name="$(basename "$binary")"
  # shellcheck disable=SC2086
  out="$(timeout 20 "$binary" --data_dir="$data/$n" $args 2>&1 >/dev/null)"; code=$?
  [ "$code" = 2 ] || fail "$name $args exits $code, not 2: $out"
  line="$(grep -- "--insecure" <<< "$out")"
  [ "$(grep -c . <<< "$line")" = 1 ] || fail "$name $args: not one line naming --insecure: $out"
  for flag in "--$named" --tls_cert --tls_key --tls_ca; do
    grep -qF -- "$flag" <<< "$line" || fail "$name $args: the message does not name $flag: $line"
  done
done
rm -rf "$sockets"
echo "${#refusals[@]} refusals checked"

echo "${#programs[@]} programs checked, $failures failures"
[ "$failures" = 0 ]
