#!/usr/bin/env bash
# Renders every overlay with kubectl's kustomize and checks the invariants; then proves
# the checker can fail by feeding it a broken rendering.
set -euo pipefail
root="$(pwd)"
check="$root/tests/deploy/check_manifests.py"
# The schema validator's node_modules live in the source tree, not in the runfiles.
source_root="$(cd "$(dirname "$(readlink -f "$check")")/../.." && pwd)"
validator="$source_root/tools/k8s-validate"
if ! command -v kubectl >/dev/null 2>&1; then
  echo "SKIP: kubectl is not installed on this machine; deploy/ was not rendered" >&2
  exit 0
fi
out="${TEST_TMPDIR:-/tmp}"
# kustomize does not follow the runfiles' symlinks: render a real copy.
rm -rf "$out/deploy" && cp -rL "$root/deploy" "$out/deploy"
have_schemas=0
if [ -d "$validator/node_modules/kubernetes-models" ] && command -v node >/dev/null 2>&1; then
  have_schemas=1
else
  echo "SKIP (schemas only): tools/k8s-validate is not installed (tools/setup.sh installs it)" >&2
fi
for overlay in dev production; do
  kubectl kustomize "$out/deploy/overlays/$overlay" > "$out/$overlay.yaml"
  /usr/bin/python3 "$check" "$out/$overlay.yaml"
  if [ "$have_schemas" = 1 ]; then
    node "$validator/validate.mjs" "$out/$overlay.yaml"
  fi
done
# The reshard Job, applied on demand: it renders and its objects are valid.
kubectl kustomize "$out/deploy/jobs" > "$out/jobs.yaml"
grep -q "kind: Job" "$out/jobs.yaml"
if [ "$have_schemas" = 1 ]; then
  node "$validator/validate.mjs" "$out/jobs.yaml"
fi
if [ "$have_schemas" = 1 ]; then
  # The schema check must be able to fail too.
  sed 's/containerPort: 7100/containerPort: "seven"/' "$out/dev.yaml" > "$out/badschema.yaml"
  if node "$validator/validate.mjs" "$out/badschema.yaml" > "$out/badschema.txt"; then
    echo "the schema validator accepted a port that is not a number" >&2
    exit 1
  fi
  grep -q "containerPort must be integer" "$out/badschema.txt"
fi
# Negative control: a privileged container and a business service listening on a TCP
# port must both be reported.
sed -e 's/privileged: false/privileged: true/' -e 's|--listen=unix:/run/eonce-business/ledger.sock|--listen=0.0.0.0:7101|' \
  "$out/dev.yaml" > "$out/broken.yaml"
if /usr/bin/python3 "$check" "$out/broken.yaml" > "$out/broken.txt"; then
  echo "the checker accepted a broken rendering" >&2
  exit 1
fi
grep -q "runs privileged" "$out/broken.txt"
grep -q "not a unix socket shared with its sidecar" "$out/broken.txt"
# With mutual TLS, a gRPC probe on the TLS port and a certificate that is not mounted
# must be reported.
sed -e 's/--health_listen=0.0.0.0:7180/--health_listen=0.0.0.0:7181/' \
  -e 's|--tls_ca=/etc/eonce/certs/ca.crt|--tls_ca=/etc/elsewhere/ca.crt|' \
  "$out/production.yaml" > "$out/broken-tls.yaml"
if /usr/bin/python3 "$check" "$out/broken-tls.yaml" > "$out/broken-tls.txt"; then
  echo "the checker accepted a broken TLS rendering" >&2
  exit 1
fi
grep -q "probe --health_listen" "$out/broken-tls.txt"
grep -q "is not on a mounted volume" "$out/broken-tls.txt"
# Secure by default: an overlay that adds --insecure, or a server on 0.0.0.0 without its
# TLS flags, must be reported.
sed -e 's|- --move_business_data|- --insecure|' "$out/dev.yaml" > "$out/insecure.yaml"
if /usr/bin/python3 "$check" "$out/insecure.yaml" > "$out/insecure.txt"; then
  echo "the checker accepted a container with --insecure" >&2
  exit 1
fi
grep -q "dedupe-sidecar runs with --insecure" "$out/insecure.txt"
grep -v -e '--tls_cert=' "$out/production.yaml" > "$out/plaintext.yaml"
if /usr/bin/python3 "$check" "$out/plaintext.yaml" > "$out/plaintext.txt"; then
  echo "the checker accepted a sidecar on 0.0.0.0 without TLS" >&2
  exit 1
fi
grep -q "ledger/dedupe-sidecar: --listen=0.0.0.0:7100 is reachable from other pods without mutual TLS" "$out/plaintext.txt"
# Sharding: replicas whose sidecars are not sharded, and a slot map that leaves out a pod,
# must both be reported.
grep -v -e '--shard_id=' "$out/dev.yaml" > "$out/unsharded.yaml"
if /usr/bin/python3 "$check" "$out/unsharded.yaml" > "$out/unsharded.txt"; then
  echo "the checker accepted replicas whose sidecars are not sharded" >&2
  exit 1
fi
grep -q "would be applied twice" "$out/unsharded.txt"
sed 's/"id": "ledger-2", "address": "ledger-2.ledger-shards:7100"/"id": "ledger-9", "address": "ledger-9.ledger-shards:7100"/' \
  "$out/dev.yaml" > "$out/missing-shard.yaml"
if /usr/bin/python3 "$check" "$out/missing-shard.yaml" > "$out/missing-shard.txt"; then
  echo "the checker accepted a slot map that leaves out a pod" >&2
  exit 1
fi
grep -q "pod ledger-2 is not a shard of the slot map" "$out/missing-shard.txt"
# An etcd that nothing seeds with the first map must be reported.
grep -v -x -e ' *- seed' "$out/dev.yaml" > "$out/unseeded.yaml"
if /usr/bin/python3 "$check" "$out/unseeded.yaml" > "$out/unseeded.txt"; then
  echo "the checker accepted sharded sidecars whose etcd nothing seeds" >&2
  exit 1
fi
grep -q "no init container seeds etcd" "$out/unseeded.txt"
# A sharded ledger whose accounts stay behind when a slot moves, or whose credits to other
# shards are never relayed, must be reported.
grep -v -e '--move_business_data' -e '--relay_from=' "$out/dev.yaml" > "$out/unmoved.yaml"
if /usr/bin/python3 "$check" "$out/unmoved.yaml" > "$out/unmoved.txt"; then
  echo "the checker accepted a sharded ledger that keeps its data and its credits" >&2
  exit 1
fi
grep -q "would leave its accounts behind" "$out/unmoved.txt"
grep -q "credits to other shards would never leave" "$out/unmoved.txt"
echo "deploy: overlays render and keep their invariants"
