#!/usr/bin/python3
"""Checks the rendered Kubernetes objects for the invariants that matter.

Usage: check_manifests.py RENDERED.yaml        an overlay
       check_manifests.py --jobs RENDERED.yaml a rendering of deploy/jobs
Each violation is printed; the exit code is the number of violations (0 = all good).
"""
import ipaddress
import json
import sys

import yaml

SLOT_COUNT = 1024

KNOWN = {
    ("apps/v1", "StatefulSet"), ("v1", "Service"), ("v1", "ConfigMap"), ("v1", "Secret"),
    ("networking.k8s.io/v1", "NetworkPolicy"), ("policy/v1", "PodDisruptionBudget"),
    ("batch/v1", "Job"),
}


def flag(args, name):
    for a in args:
        if a.startswith("--%s=" % name):
            return a.split("=", 1)[1]
    return None


# The addresses a server takes callers on (--health_listen and --metrics_listen stay
# plaintext: they reveal no identity-bearing data), and the defaults of the binaries
# whose --listen has one that other hosts reach.
LISTEN_FLAGS = ("listen", "sidecar_listen")
DEFAULT_LISTEN = {"dedupe_sidecar": "0.0.0.0:7100"}


def is_local(address):
    """A unix socket, or a TCP address on the loopback network (common/rpc/server_security.h)."""
    if address.startswith("unix:") and not address.startswith("unix-abstract:"):
        return True
    host = address.rsplit(":", 1)[0] if ":" in address else ""
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if host.lower() == "localhost":
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def check_transport(where, container):
    """Secure by default, in every overlay: no --insecure, and a server that listens where
    other pods reach it runs mutual TLS."""
    problems = []
    args = container.get("args", [])
    if any(a == "--insecure" or a.startswith("--insecure=") and a != "--insecure=false"
           for a in args):
        problems.append("%s runs with --insecure: identities would come from anyone's headers" % where)
    image = container.get("image", "").split(":")[0].rsplit("/", 1)[-1]
    for setting in LISTEN_FLAGS:
        address = flag(args, setting)
        if address is None and setting == "listen":
            address = DEFAULT_LISTEN.get(image)
        if address is None or is_local(address):
            continue
        if flag(args, "tls_cert") is None:
            problems.append("%s: --%s=%s is reachable from other pods without mutual TLS "
                            "(--tls_cert, --tls_key, --tls_ca)" % (where, setting, address))
    return problems


def check(objects):
    problems = []
    kinds = {o["kind"] for o in objects}
    for o in objects:
        if (o.get("apiVersion"), o.get("kind")) not in KNOWN:
            problems.append("unexpected object %s %s" % (o.get("apiVersion"), o.get("kind")))
        if not o.get("metadata", {}).get("name"):
            problems.append("%s without a name" % o.get("kind"))
    for required in ["StatefulSet", "Service", "NetworkPolicy", "PodDisruptionBudget", "ConfigMap", "Secret"]:
        if required not in kinds:
            problems.append("no %s rendered" % required)

    for o in objects:
        if o["kind"] != "StatefulSet":
            continue
        name = o["metadata"]["name"]
        pod = o["spec"]["template"]["spec"]
        containers = pod["containers"]
        claims = {c["metadata"]["name"] for c in o["spec"].get("volumeClaimTemplates", [])}
        grace = pod.get("terminationGracePeriodSeconds", 30)
        pod_security = pod.get("securityContext", {})
        if not pod_security.get("runAsNonRoot"):
            problems.append("%s: pod does not set runAsNonRoot" % name)
        for c in containers:
            sc = c.get("securityContext", {})
            where = "%s/%s" % (name, c["name"])
            if sc.get("privileged"):
                problems.append("%s runs privileged" % where)
            if sc.get("allowPrivilegeEscalation", True):
                problems.append("%s allows privilege escalation" % where)
            if not sc.get("readOnlyRootFilesystem"):
                problems.append("%s has a writable root filesystem" % where)
            if "resources" not in c or "limits" not in c["resources"] or "requests" not in c["resources"]:
                problems.append("%s has no resource requests and limits" % where)
            problems += check_transport(where, c)
            args = c.get("args", [])
            data_dir = flag(args, "data_dir")
            if data_dir is not None:
                mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
                if mounts.get(data_dir) not in claims:
                    problems.append("%s: --data_dir=%s is not a mounted PVC" % (where, data_dir))
            # Mutual TLS: every file is on a mounted volume, and the kubelet's gRPC probes
            # (which cannot present a client certificate) go to the plaintext health port.
            if flag(args, "tls_cert") is not None:
                mount_paths = [m["mountPath"] for m in c.get("volumeMounts", [])]
                for setting in ("tls_cert", "tls_key", "tls_ca"):
                    path = flag(args, setting)
                    if path is None:
                        problems.append("%s: --tls_cert without --%s" % (where, setting))
                    elif not any(path.startswith(m.rstrip("/") + "/") for m in mount_paths):
                        problems.append("%s: --%s=%s is not on a mounted volume" % (where, setting, path))
                health = (flag(args, "health_listen") or "").split(":")[-1]
                for probe in ("readinessProbe", "livenessProbe"):
                    grpc_probe = c.get(probe, {}).get("grpc")
                    if grpc_probe is not None and str(grpc_probe.get("port")) != health:
                        problems.append("%s: the %s calls gRPC port %s, which needs a client "
                                        "certificate; probe --health_listen" % (where, probe, grpc_probe.get("port")))
            drain = flag(args, "drain_ms")
            if drain is not None and int(drain) / 1000.0 >= grace:
                problems.append("%s: drain %s ms does not fit the %s s grace period" % (where, drain, grace))
        names = [c["name"] for c in containers]
        if "dedupe-sidecar" in names:
            sidecar = containers[names.index("dedupe-sidecar")]
            if "readinessProbe" not in sidecar or "livenessProbe" not in sidecar:
                problems.append("%s: the sidecar has no readiness or liveness probe" % name)
            upstream = flag(sidecar.get("args", []), "upstream") or ""
            # The business is what is neither the sidecar nor a relay of its outbox.
            business = [c for c in containers if c["name"] != "dedupe-sidecar"
                        and flag(c.get("args", []), "relay_from") is None]
            if not business:
                problems.append("%s: the sidecar has no business service in its pod" % name)
            # The business listens only on a unix socket in a volume that it and its
            # sidecar share: nothing else can reach it, so it may trust the identity
            # metadata the sidecar sends.
            pod_volumes = {v["name"]: v for v in pod.get("volumes", [])}
            sidecar_mounts = {m["mountPath"].rstrip("/"): m["name"] for m in sidecar.get("volumeMounts", [])}
            for b in business:
                listen = flag(b.get("args", []), "listen") or ""
                socket = listen[len("unix:"):] if listen.startswith("unix:") else None
                if socket is None:
                    problems.append("%s/%s listens on %r, not a unix socket shared with its sidecar" % (name, b["name"], listen))
                    continue
                folder = socket.rsplit("/", 1)[0]
                mounts = {m["mountPath"].rstrip("/"): m["name"] for m in b.get("volumeMounts", [])}
                volume = mounts.get(folder)
                if volume is None or sidecar_mounts.get(folder) != volume:
                    problems.append("%s/%s: its socket folder %s is not a volume shared with the sidecar" % (name, b["name"], folder))
                elif "emptyDir" not in pod_volumes.get(volume, {}):
                    problems.append("%s/%s: its socket volume %s is not the pod's own emptyDir" % (name, b["name"], volume))
                if upstream != listen:
                    problems.append("%s: the sidecar's upstream %r is not %s" % (name, upstream, b["name"]))
                if flag(b.get("args", []), "tls_cert") is not None:
                    problems.append("%s/%s: TLS on the pod's own socket is not used by the sidecar" % (name, b["name"]))
        if "dedupe-sidecar" in names:
            problems += check_shards(o, containers[names.index("dedupe-sidecar")], objects)
            problems += check_business_shards(o, containers, containers[names.index("dedupe-sidecar")])
        if "outbox-agent" in names:
            agent = containers[names.index("outbox-agent")]
            if "readinessProbe" not in agent or "livenessProbe" not in agent:
                problems.append("%s: the agent has no probes" % name)
    return problems + check_no_map_file(objects) + check_etcd(objects) + check_jobs(objects)


def resolve(value, container, objects):
    """Expands $(VAR) as the kubelet does, from the container's env (a value, or a key of a
    rendered ConfigMap); a variable it cannot resolve stays as written."""
    if value is None:
        return None
    for env in container.get("env", []):
        ref = env.get("valueFrom", {}).get("configMapKeyRef")
        if "value" in env:
            found = env["value"]
        elif ref is not None:
            maps = [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == ref["name"]]
            found = maps[0].get("data", {}).get(ref["key"]) if maps else None
        else:
            found = None
        if found is not None:
            value = value.replace("$(%s)" % env["name"], found)
    return value


def mounted(container, path):
    return any(path.startswith(m["mountPath"].rstrip("/") + "/") for m in container.get("volumeMounts", []))


def pods(objects):
    """(name, replicas, pod spec) of every workload: StatefulSets and Jobs."""
    for o in objects:
        if o["kind"] in ("StatefulSet", "Job"):
            yield o["metadata"]["name"], o["spec"].get("replicas", 1), o["spec"]["template"]["spec"]


def check_no_map_file(objects):
    """The slot map lives in etcd: no process reads a file as the map, and only `eonce
    reshard seed` reads one (to write the first map into an empty etcd)."""
    problems = []
    for name, _, pod in pods(objects):
        for c in pod.get("containers", []) + pod.get("initContainers", []):
            args = c.get("args", [])
            for setting in ("slot_map", "sidecar_slot_map"):
                if flag(args, setting) is not None:
                    problems.append("%s/%s reads the slot map from a file (--%s): the map lives in "
                                    "etcd (--etcd_endpoints); a file only seeds it (eonce reshard "
                                    "seed)" % (name, c["name"], setting))
            seeding = args[:1] == ["seed"]
            for setting in ("map", "file"):
                if flag(args, setting) is not None and (setting == "map" or not seeding):
                    problems.append("%s/%s reads or writes a slot map file (--%s) outside `eonce "
                                    "reshard seed --file`: a move changes the map in etcd, by "
                                    "compare-and-swap" % (name, c["name"], setting))
    return problems


def check_etcd_client(where, container, objects):
    """A client of etcd names it (--etcd_endpoints, --etcd_prefix) and talks mutual TLS to it;
    when etcd is rendered here, every member is an endpoint and every endpoint a member."""
    problems = []
    args = container.get("args", [])
    endpoints = resolve(flag(args, "etcd_endpoints"), container, objects)
    if not endpoints:
        return ["%s: no --etcd_endpoints: it cannot read the slot map or hold a lease" % where]
    if not resolve(flag(args, "etcd_prefix"), container, objects):
        problems.append("%s: no --etcd_prefix: another business on the same etcd would share its "
                        "slot map" % where)
    for setting in ("etcd_tls_cert", "etcd_tls_key", "etcd_tls_ca"):
        path = flag(args, setting)
        if path is None:
            problems.append("%s talks to etcd without mutual TLS (--%s): anyone on the network "
                            "could rewrite the slot map" % (where, setting))
        elif not mounted(container, path):
            problems.append("%s: --%s=%s is not on a mounted volume" % (where, setting, path))
    listed = {e.strip() for e in endpoints.split(",") if e.strip()}
    for sts in etcd_sets(objects):
        members = {"%s-%d.%s:2379" % (sts["metadata"]["name"], i, sts["spec"].get("serviceName"))
                   for i in range(sts["spec"].get("replicas", 1))}
        for member in sorted(members - listed):
            problems.append("%s: etcd member %s is not among its --etcd_endpoints (no failover to "
                            "it)" % (where, member))
        for endpoint in sorted(listed - members):
            problems.append("%s: --etcd_endpoints names %s, which is no member of %s" %
                            (where, endpoint, sts["metadata"]["name"]))
    return problems


def etcd_sets(objects):
    return [o for o in objects if o["kind"] == "StatefulSet" and any(
        c.get("image", "").split(":")[0].rsplit("/", 1)[-1] == "etcd"
        for c in o["spec"]["template"]["spec"]["containers"])]


def check_etcd(objects):
    """etcd keeps a quorum through one lost or drained member, keeps its data on a PVC and
    talks mutual TLS to its peers and its clients."""
    problems = []
    for sts in etcd_sets(objects):
        name = sts["metadata"]["name"]
        spec = sts["spec"]
        replicas = spec.get("replicas", 1)
        if replicas != 3:
            problems.append("%s: %d etcd members, not 3: a quorum must survive one member down" % (name, replicas))
        labels = spec["template"]["metadata"].get("labels", {})
        budgets = [o for o in objects if o["kind"] == "PodDisruptionBudget"
                   and o["spec"].get("selector", {}).get("matchLabels")
                   and all(labels.get(k) == v for k, v in o["spec"]["selector"]["matchLabels"].items())]
        if not any(b["spec"].get("minAvailable") == replicas // 2 + 1 for b in budgets):
            problems.append("%s: no PodDisruptionBudget keeps etcd's quorum (minAvailable %d): a "
                            "drain could take two members" % (name, replicas // 2 + 1))
        service = [o for o in objects if o["kind"] == "Service" and o["metadata"]["name"] == spec.get("serviceName")]
        if not service or service[0]["spec"].get("clusterIP") != "None" or \
                not service[0]["spec"].get("publishNotReadyAddresses"):
            problems.append("%s: serviceName %r is not a headless Service that publishes members "
                            "before they are ready (they could not find each other)" % (name, spec.get("serviceName")))
        claims = {c["metadata"]["name"] for c in spec.get("volumeClaimTemplates", [])}
        etcd = [c for c in spec["template"]["spec"]["containers"]
                if c.get("image", "").split(":")[0].endswith("etcd")][0]
        args = etcd.get("args", [])
        mounts = {m["mountPath"].rstrip("/"): m["name"] for m in etcd.get("volumeMounts", [])}
        data = flag(args, "data-dir") or ""
        if not any(data.startswith(path + "/") and volume in claims for path, volume in mounts.items()):
            problems.append("%s: --data-dir=%s is not on a PVC" % (name, data))
        for side, urls, auth, files in (
                ("clients", ("listen-client-urls", "advertise-client-urls"), "client-cert-auth",
                 ("cert-file", "key-file", "trusted-ca-file")),
                ("peers", ("listen-peer-urls", "initial-advertise-peer-urls"), "peer-client-cert-auth",
                 ("peer-cert-file", "peer-key-file", "peer-trusted-ca-file"))):
            plain = [u for setting in urls for u in (flag(args, setting) or "http://").split(",")
                     if not u.startswith("https://")]
            missing = [f for f in files if flag(args, f) is None or not mounted(etcd, flag(args, f))]
            if plain or "--%s" % auth not in args or missing:
                problems.append("%s: etcd talks to its %s without mutual TLS (https URLs, --%s, "
                                "certificates on a mounted volume)" % (name, side, auth))
        cluster = flag(args, "initial-cluster") or ""
        for i in range(replicas):
            if "%s-%d=" % (name, i) not in cluster:
                problems.append("%s: --initial-cluster does not name member %s-%d" % (name, name, i))
    return problems


def check_shards(sts, sidecar, objects):
    """More than one pod is sharded on etcd, and the map that seeds etcd names every pod
    where it listens."""
    problems = []
    name = sts["metadata"]["name"]
    replicas = sts["spec"].get("replicas", 1)
    args = sidecar.get("args", [])
    shard_id, endpoints = flag(args, "shard_id"), flag(args, "etcd_endpoints")
    if replicas > 1 and (shard_id is None or endpoints is None):
        return ["%s: %d replicas whose sidecars are not sharded (--shard_id, --etcd_endpoints): a key "
                "retried to two pods would be applied twice" % (name, replicas)]
    if shard_id is None:
        return problems
    if shard_id != "$(POD_NAME)":
        problems.append("%s: --shard_id is %r, not the pod's name $(POD_NAME)" % (name, shard_id))
    problems += check_etcd_client("%s/%s" % (name, sidecar["name"]), sidecar, objects)
    service = sts["spec"].get("serviceName")
    headless = [o for o in objects if o["kind"] == "Service" and o["metadata"]["name"] == service
                and o["spec"].get("clusterIP") == "None"]
    if not headless:
        problems.append("%s: serviceName %r is not a headless Service (no per-pod addresses)" % (name, service))
    port = next((p["containerPort"] for p in sidecar.get("ports", []) if p.get("name") == "grpc"), None)
    return problems + check_seed(name, replicas, "%s.%s:%s" % ("%s", service, port), objects)


def check_seed(name, replicas, address, objects):
    """The first map comes from a Job running `eonce reshard seed` on a mounted ConfigMap; it
    names every pod at its address and gives every slot exactly one owner."""
    seeds = [(job_name, c) for job_name, _, pod in pods(objects) for c in pod.get("containers", [])
             if c.get("args", [])[:1] == ["seed"]]
    if not seeds:
        return ["%s: sharded, but no Job seeds the first slot map (eonce reshard seed)" % name]
    problems = []
    job_name, seed = seeds[0]
    problems += check_etcd_client("%s/%s" % (job_name, seed["name"]), seed, objects)
    path = flag(seed["args"], "file") or ""
    folder, file_name = path.rsplit("/", 1) if "/" in path else ("", path)
    job_pod = [pod for n, _, pod in pods(objects) if n == job_name][0]
    mounts = {m["mountPath"].rstrip("/"): m["name"] for m in seed.get("volumeMounts", [])}
    volumes = {v["name"]: v for v in job_pod.get("volumes", [])}
    config = volumes.get(mounts.get(folder), {}).get("configMap", {}).get("name")
    maps = [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == config]
    if not maps or file_name not in maps[0].get("data", {}):
        return problems + ["%s: --file=%s is not a key of a mounted ConfigMap" % (job_name, path)]
    try:
        slot_map_data = json.loads(maps[0]["data"][file_name])
    except ValueError as e:
        return problems + ["%s: the seed slot map is not JSON: %s" % (job_name, e)]
    shards = {s["id"]: s["address"] for s in slot_map_data.get("shards", [])}
    for i in range(replicas):
        pod = "%s-%d" % (name, i)
        want = address % pod
        if pod not in shards:
            problems.append("%s: pod %s is not a shard of the seed slot map" % (name, pod))
        elif shards[pod] != want:
            problems.append("%s: the seed slot map gives %s the address %s, not %s" % (name, pod, shards[pod], want))
    owners = [0] * SLOT_COUNT
    for r in slot_map_data.get("ranges", []):
        for slot in range(r["first"], r["last"] + 1):
            if 0 <= slot < SLOT_COUNT:
                owners[slot] += 1
        if r["shard"] not in shards:
            problems.append("%s: the seed slot map gives slots to unknown shard %s" % (name, r["shard"]))
    if any(n != 1 for n in owners):
        problems.append("%s: the seed slot map does not give every slot exactly one owner" % name)
    return problems


def check_jobs(objects):
    """The on-demand reshard Job: it moves slots through etcd, with mutual TLS to etcd and a
    platform operator's certificate for the sidecars, and needs no Kubernetes API."""
    problems = []
    for name, _, pod in pods(objects):
        for c in pod.get("containers", []):
            if not c.get("image", "").split(":")[0].endswith("/reshard") or c.get("args", [])[:1] == ["seed"]:
                continue
            where = "%s/%s" % (name, c["name"])
            problems += check_etcd_client(where, c, objects)
            if flag(c.get("args", []), "tls_cert") is None:
                problems.append("%s calls the sidecars without a platform operator's certificate" % where)
            if pod.get("automountServiceAccountToken", True):
                problems.append("%s: the pod mounts a Kubernetes API token it does not need" % where)
    return problems


def check_business_shards(sts, containers, sidecar):
    """A business of each pod's own, in more than one pod: its data moves with its slots,
    and what its outbox holds for other shards is relayed from the pod."""
    name = sts["metadata"]["name"]
    if sts["spec"].get("replicas", 1) <= 1:
        return []
    problems = []
    args = sidecar.get("args", [])
    if "--move_business_data" not in args:
        problems.append("%s: sharded, but the sidecar does not move the business's data with "
                        "its slots (--move_business_data): a moved slot would leave its "
                        "accounts behind" % name)
    upstream = flag(args, "upstream")
    relays = [c for c in containers if flag(c.get("args", []), "relay_from") is not None]
    ledgers = [c for c in containers if c.get("image", "").split(":")[0].endswith("/ledger_service")]
    for ledger in ledgers:
        if "--cross_slot_credits" not in ledger.get("args", []):
            problems.append("%s/%s: sharded, but a transfer to another shard's account is not "
                            "sent as a credit (--cross_slot_credits)" % (name, ledger["name"]))
    if ledgers and not any(flag(r["args"], "relay_from") == upstream for r in relays):
        problems.append("%s: no container relays the business's outbox (--relay_from=%s): "
                        "credits to other shards would never leave" % (name, upstream))
    for r in relays:
        if "readinessProbe" not in r or "livenessProbe" not in r:
            problems.append("%s/%s: the relay has no probes" % (name, r["name"]))
    return problems


def main():
    # --jobs: the on-demand Jobs (deploy/jobs), rendered apart from any overlay.
    jobs_only = sys.argv[1] == "--jobs"
    with open(sys.argv[-1]) as f:
        objects = [o for o in yaml.safe_load_all(f) if o]
    if jobs_only:
        problems = ["unexpected object %s %s" % (o.get("apiVersion"), o.get("kind"))
                    for o in objects if (o.get("apiVersion"), o.get("kind")) not in KNOWN]
        problems += check_no_map_file(objects) + check_jobs(objects)
        if not any(o["kind"] == "Job" for o in objects):
            problems.append("no Job rendered")
    else:
        problems = check(objects)
    for p in problems:
        print("manifest problem:", p)
    print("%d objects checked, %d problems" % (len(objects), len(problems)))
    return min(len(problems), 100)


if __name__ == "__main__":
    sys.exit(main())
