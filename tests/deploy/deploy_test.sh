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
for overlay in dev production one-shard; do
  kubectl kustomize "$out/deploy/overlays/$overlay" > "$out/$overlay.yaml"
  /usr/bin/python3 "$check" "$out/$overlay.yaml"
  if [ "$have_schemas" = 1 ]; then
    node "$validator/validate.mjs" "$out/$overlay.yaml"
  fi
done
# One shard needs no etcd, no slot map and no relay.
if grep -q -e "name: eonce-etcd" -e "--etcd_endpoints" -e "slot_map" -e "follow-up-relay" "$out/one-shard.yaml"; then
  echo "the one-shard overlay renders sharding" >&2
  exit 1
fi
# The reshard Job, applied on demand: it renders, keeps its invariants, and its objects are
# valid.
kubectl kustomize "$out/deploy/jobs" > "$out/jobs.yaml"
grep -q "kind: Job" "$out/jobs.yaml"
/usr/bin/python3 "$check" --jobs "$out/jobs.yaml"
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
# Rewrites a rendering with a Python expression over its objects (o: the list), so that a
# broken case changes exactly the object it names.
mutate() {
  /usr/bin/python3 -c '
import sys, yaml
o = [x for x in yaml.safe_load_all(open(sys.argv[1])) if x]
def find(kind, name):
    return [x for x in o if x["kind"] == kind and x["metadata"]["name"] == name][0]
def container(kind, name, c):
    return [x for x in find(kind, name)["spec"]["template"]["spec"]["containers"] if x["name"] == c][0]
exec(sys.argv[3])
yaml.safe_dump_all(o, open(sys.argv[2], "w"))
' "$@"
}
# expect_problem CASE MESSAGE: the checker must refuse $out/CASE.yaml and say MESSAGE.
expect_problem() {
  if /usr/bin/python3 "$check" ${3:-} "$out/$1.yaml" > "$out/$1.txt"; then
    echo "the checker accepted $1" >&2
    exit 1
  fi
  if ! grep -q -e "$2" "$out/$1.txt"; then
    echo "the checker refused $1 without saying: $2" >&2
    cat "$out/$1.txt" >&2
    exit 1
  fi
}
# Sharding: replicas whose sidecars are not sharded on etcd, and a seed map that leaves out
# a pod, must both be reported.
grep -v -e '--shard_id=' "$out/dev.yaml" > "$out/unsharded.yaml"
expect_problem unsharded "would be applied twice"
grep -v -e '--etcd_endpoints=' "$out/dev.yaml" > "$out/no-etcd.yaml"
expect_problem no-etcd "replicas whose sidecars are not sharded (--shard_id, --etcd_endpoints)"
mutate "$out/one-shard.yaml" "$out/one-shard-scaled.yaml" 'find("StatefulSet", "ledger")["spec"]["replicas"] = 2'
expect_problem one-shard-scaled "ledger: 2 replicas whose sidecars are not sharded"
sed 's/"id": "ledger-2", "address": "ledger-2.ledger-shards:7100"/"id": "ledger-9", "address": "ledger-9.ledger-shards:7100"/' \
  "$out/dev.yaml" > "$out/missing-shard.yaml"
expect_problem missing-shard "pod ledger-2 is not a shard of the seed slot map"
mutate "$out/dev.yaml" "$out/no-seed.yaml" 'o.remove(find("Job", "eonce-seed-slot-map"))'
expect_problem no-seed "no Job seeds the first slot map"
# The ConfigMap route is retired: a sidecar that reads the map from a file, and a reshard
# Job that reads or writes a map file, must be reported.
sed -e 's|- --move_business_data|- --slot_map=/etc/eonce/slots/slot_map.json|' "$out/dev.yaml" > "$out/map-file.yaml"
expect_problem map-file "dedupe-sidecar reads the slot map from a file (--slot_map)"
sed -e 's|- --etcd_prefix=.*|- --map=/work/slot_map.json|' "$out/jobs.yaml" > "$out/jobs-map-file.yaml"
expect_problem jobs-map-file "reshard reads or writes a slot map file (--map)" --jobs
sed -e 's|- --etcd_prefix=.*|- --file=/work/slot_map.json|' "$out/jobs.yaml" > "$out/jobs-seed-file.yaml"
expect_problem jobs-seed-file "reshard reads or writes a slot map file (--file)" --jobs
# etcd: the sidecars and the Jobs talk mutual TLS to it and know every member; it runs three
# members, a budget that keeps two, and mutual TLS between members.
grep -v -e '--etcd_tls_' "$out/dev.yaml" > "$out/etcd-plain-client.yaml"
expect_problem etcd-plain-client "ledger/dedupe-sidecar talks to etcd without mutual TLS"
grep -v -e '--etcd_tls_' "$out/jobs.yaml" > "$out/jobs-plain-client.yaml"
expect_problem jobs-plain-client "eonce-reshard/reshard talks to etcd without mutual TLS" --jobs
mutate "$out/dev.yaml" "$out/etcd-two-endpoints.yaml" \
  'find("ConfigMap", "eonce-etcd")["data"]["endpoints"] = "eonce-etcd-0.eonce-etcd:2379,eonce-etcd-1.eonce-etcd:2379"'
expect_problem etcd-two-endpoints "etcd member eonce-etcd-2.eonce-etcd:2379 is not among its --etcd_endpoints"
mutate "$out/dev.yaml" "$out/etcd-one-member.yaml" 'find("StatefulSet", "eonce-etcd")["spec"]["replicas"] = 1'
expect_problem etcd-one-member "1 etcd members, not 3"
mutate "$out/dev.yaml" "$out/etcd-no-budget.yaml" 'o.remove(find("PodDisruptionBudget", "eonce-etcd"))'
expect_problem etcd-no-budget "no PodDisruptionBudget keeps etcd's quorum"
mutate "$out/dev.yaml" "$out/etcd-plain-peers.yaml" \
  'container("StatefulSet", "eonce-etcd", "etcd")["args"].remove("--peer-client-cert-auth")'
expect_problem etcd-plain-peers "etcd talks to its peers without mutual TLS"
mutate "$out/dev.yaml" "$out/etcd-no-pvc.yaml" \
  'find("StatefulSet", "eonce-etcd")["spec"]["volumeClaimTemplates"] = []'
expect_problem etcd-no-pvc "data-dir=/var/lib/etcd/data is not on a PVC"
mutate "$out/jobs.yaml" "$out/jobs-token.yaml" \
  'del find("Job", "eonce-reshard")["spec"]["template"]["spec"]["automountServiceAccountToken"]'
expect_problem jobs-token "mounts a Kubernetes API token" --jobs
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
