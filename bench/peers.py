#!/usr/bin/env python3
"""Measures the two peers eonce is compared with, on this machine, in this run.

Postgres: a Stripe-like idempotency table (a `started` row, then `committed` with the
response; two durable commits per first-seen command), driven by pgbench -M prepared over
TCP. Redis: a claim with SET NX under appendfsync always, driven by redis-benchmark.
Each server is a throwaway one: started on loopback in a temporary folder with fsync on,
and stopped (and its folder removed) at the end, also when a measurement fails.

Writes a JSON file: {"postgres": {"first_seen": {"1": {...}, ...}, "duplicate": {...}},
"redis": {...}}, each entry {"ops_per_s", "p50_us", "runs"}, the median of `--runs` runs.
"""
import argparse
import glob
import json
import os
import pwd
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

ARGS = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ARGS.add_argument("--out", required=True, help="where the JSON goes")
ARGS.add_argument("--clients", default="1,16,64", help="client counts to measure at")
ARGS.add_argument("--seconds", type=float, default=4.0, help="length of one run")
ARGS.add_argument("--runs", type=int, default=3, help="runs per figure (the median is kept)")
ARGS.add_argument("--prefill", type=int, default=100_000, help="committed keys for duplicates")

TABLE = """
CREATE TABLE idempotency_keys (
  idem_key      text        PRIMARY KEY,
  payload_hash  bytea       NOT NULL,
  status        text        NOT NULL,
  response      bytea,
  created_at    timestamptz NOT NULL DEFAULT now(),
  updated_at    timestamptz
);
"""

# One pgbench transaction is one command; each statement autocommits (a durable commit).
FIRST_SEEN = r"""
\set k random(1, 9000000000000000000)
INSERT INTO idempotency_keys (idem_key, payload_hash, status)
  VALUES ('k' || :k, sha256(convert_to('payload-' || :k, 'UTF8')), 'started')
  ON CONFLICT (idem_key) DO NOTHING;
UPDATE idempotency_keys SET status = 'committed', response = decode(repeat('ab', 200), 'hex'),
  updated_at = now() WHERE idem_key = 'k' || :k AND status = 'started';
"""

DUPLICATE = r"""
\set k random(1, {prefill})
INSERT INTO idempotency_keys (idem_key, payload_hash, status)
  VALUES ('d' || :k, sha256(convert_to('payload-' || :k, 'UTF8')), 'started')
  ON CONFLICT (idem_key) DO NOTHING;
SELECT status, payload_hash, response FROM idempotency_keys WHERE idem_key = 'd' || :k;
"""

PREFILL = """
INSERT INTO idempotency_keys (idem_key, payload_hash, status, response, updated_at)
  SELECT 'd' || g, sha256(convert_to('payload-' || g, 'UTF8')), 'committed',
         decode(repeat('ab', 200), 'hex'), now()
  FROM generate_series(1, {prefill}) g;
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def median(runs):
    ordered = sorted(runs, key=lambda r: r["ops_per_s"])
    middle = dict(ordered[len(ordered) // 2])
    middle["runs"] = [round(r["ops_per_s"], 1) for r in runs]
    return middle


def stop(server):
    """Stops a server started with Popen: politely, then by force after 30 s."""
    if server is None:
        return
    server.terminate()
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.kill()


def p50_of(latencies_us):
    if not latencies_us:
        return 0.0
    ordered = sorted(latencies_us)
    return float(ordered[len(ordered) // 2])


class Postgres:
    """A throwaway cluster; as root, the server runs as the `postgres` user."""

    def __init__(self, work):
        versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"))
        if not versions:
            sys.exit("peers: Postgres is not installed (./eonce bench --peers installs it)")
        self.bin = os.path.dirname(versions[-1])
        self.dir = os.path.join(work, "pg")
        self.port = free_port()
        self.prefix = []
        os.makedirs(self.dir)
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")
            for path in (work, self.dir):
                os.chown(path, user.pw_uid, user.pw_gid)
            self.prefix = ["runuser", "-u", "postgres", "--"]
        self.server = None

    def run(self, *argv, **kwargs):
        return subprocess.run(self.prefix + list(argv), check=True, text=True,
                              capture_output=True, **kwargs)

    def start(self):
        self.run(f"{self.bin}/initdb", "-D", f"{self.dir}/data", "-A", "trust", "-U", "postgres",
                 "--no-sync")
        self.server = subprocess.Popen(
            self.prefix + [f"{self.bin}/postgres", "-D", f"{self.dir}/data",
                           "-c", f"port={self.port}", "-c", "listen_addresses=127.0.0.1",
                           "-c", f"unix_socket_directories={self.dir}",
                           "-c", "fsync=on", "-c", "synchronous_commit=on",
                           "-c", "shared_buffers=1GB", "-c", "max_connections=200"],
            stdout=subprocess.DEVNULL, stderr=open(f"{self.dir}/server.log", "w"))
        for _ in range(300):  # at most 30 s
            ready = subprocess.run([f"{self.bin}/pg_isready", "-h", "127.0.0.1", "-p",
                                    str(self.port)], capture_output=True)
            if ready.returncode == 0:
                return
            time.sleep(0.1)
        raise RuntimeError("Postgres did not become ready; see " + self.dir)

    def sql(self, text):
        subprocess.run([f"{self.bin}/psql", "-h", "127.0.0.1", "-p", str(self.port), "-U",
                        "postgres", "-v", "ON_ERROR_STOP=1", "-q", "-c", text], check=True,
                       capture_output=True, text=True)

    def bench(self, script, clients, seconds):
        path = os.path.join(self.dir, "script.sql")
        with open(path, "w") as f:
            f.write(script)
        os.chmod(path, 0o644)
        logs = os.path.join(self.dir, "log")
        shutil.rmtree(logs, ignore_errors=True)
        os.makedirs(logs)
        out = subprocess.run(
            [f"{self.bin}/pgbench", "-n", "-M", "prepared", "-h", "127.0.0.1", "-p",
             str(self.port), "-U", "postgres", "-c", str(clients), "-j", str(min(clients, 2)),
             "-T", str(int(round(seconds))), "-f", path, "-l", "--log-prefix",
             os.path.join(logs, "tx"), "postgres"],
            check=True, capture_output=True, text=True).stdout
        tps = re.search(r"tps = ([\d.]+) \(without initial connection time\)", out)
        latencies = []
        for name in glob.glob(os.path.join(logs, "tx*")):
            with open(name) as f:
                for line in f:
                    fields = line.split()
                    if len(fields) >= 3:
                        latencies.append(int(fields[2]))
        return {"ops_per_s": float(tps.group(1)) if tps else 0.0, "p50_us": p50_of(latencies)}

    def stop(self):
        stop(self.server)


class Redis:
    def __init__(self, work):
        if shutil.which("redis-server") is None:
            sys.exit("peers: redis-server is not installed (./eonce bench --peers installs it)")
        self.dir = os.path.join(work, "redis")
        os.makedirs(self.dir)
        self.port = free_port()
        self.server = None

    def start(self):
        self.server = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "yes", "--appendfsync", "always", "--dir", self.dir,
             "--daemonize", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(300):
            ping = subprocess.run(["redis-cli", "-p", str(self.port), "ping"],
                                  capture_output=True, text=True)
            if ping.stdout.strip() == "PONG":
                return
            time.sleep(0.1)
        raise RuntimeError("redis-server did not answer")

    def keys(self):
        out = subprocess.run(["redis-cli", "-p", str(self.port), "dbsize"], check=True,
                             capture_output=True, text=True).stdout
        return int(out.strip())

    def bench(self, clients, requests, keyspace, prefix="idem"):
        # redis-benchmark draws the same random sequence in every invocation, so a run that
        # must see new keys names them under a prefix of its own.
        value = "v" * 200
        out = subprocess.run(
            ["redis-benchmark", "-h", "127.0.0.1", "-p", str(self.port), "-c", str(clients),
             "-n", str(requests), "-r", str(keyspace), "--csv",
             "SET", prefix + ":__rand_int__", value, "NX", "EX", "86400"],
            check=True, capture_output=True, text=True).stdout
        rows = [line for line in out.splitlines() if line.startswith('"SET')]
        fields = [f.strip('"') for f in rows[-1].split(",")]
        # "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms",...
        return {"ops_per_s": float(fields[1]), "p50_us": float(fields[4]) * 1000}

    def stop(self):
        stop(self.server)


def main():
    options = ARGS.parse_args()
    clients = [int(c) for c in options.clients.split(",")]
    results = {"postgres": {"first_seen": {}, "duplicate": {}},
               "redis": {"first_seen": {}, "duplicate": {}},
               "seconds": options.seconds, "runs": options.runs}
    work = tempfile.mkdtemp(prefix="eonce-peers-")
    try:
        pg = Postgres(work)
        try:
            pg.start()
            pg.sql(TABLE)
            pg.sql(PREFILL.format(prefill=options.prefill))
            for flow, script in (("first_seen", FIRST_SEEN),
                                 ("duplicate", DUPLICATE.format(prefill=options.prefill))):
                for c in clients:
                    pg.bench(script, c, 1)  # warm-up
                    runs = [pg.bench(script, c, options.seconds) for _ in range(options.runs)]
                    results["postgres"][flow][str(c)] = median(runs)
                    print("  postgres %-10s %3d clients %9.0f ops/s" %
                          (flow, c, results["postgres"][flow][str(c)]["ops_per_s"]), flush=True)
        finally:
            pg.stop()
        redis = Redis(work)
        try:
            redis.start()
            # Requests per run: about `seconds` worth at the rates such a server reaches. Keys
            # come from 10^9 (redis-benchmark's -r wraps above 2^31: every SET would hit one key).
            per_client_rate = {1: 4_000, 16: 25_000, 64: 45_000}
            for c in clients:
                n = int(per_client_rate.get(c, 25_000) * options.seconds)
                redis.bench(c, max(1000, n // 4), 10**9, "warm-%d" % c)  # warm-up
                before = redis.keys()
                runs = [redis.bench(c, n, 10**9, "new-%d-%d" % (c, r))
                        for r in range(options.runs)]
                if redis.keys() - before < 0.99 * n * options.runs:
                    raise RuntimeError("redis: the SETs did not create new keys; not first seen")
                results["redis"]["first_seen"][str(c)] = median(runs)
                print("  redis    first_seen %3d clients %9.0f ops/s" %
                      (c, results["redis"]["first_seen"][str(c)]["ops_per_s"]), flush=True)
            redis.bench(16, 20_000, 1000)  # every key of the duplicate keyspace exists
            for c in clients:
                n = int(per_client_rate.get(c, 25_000) * 2 * options.seconds)
                runs = [redis.bench(c, n, 1000) for _ in range(options.runs)]
                results["redis"]["duplicate"][str(c)] = median(runs)
                print("  redis    duplicate  %3d clients %9.0f ops/s" %
                      (c, results["redis"]["duplicate"][str(c)]["ops_per_s"]), flush=True)
        finally:
            redis.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    with open(options.out, "w") as f:
        json.dump(results, f, indent=2)
    print("peers: " + options.out)


if __name__ == "__main__":
    main()
