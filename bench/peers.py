#!/usr/bin/env python3
"""Keeps the two peers eonce is compared with running, and measures them one run at a time.

Postgres: a Stripe-like idempotency table (a `started` row, then `committed` with the
response; two durable commits per first-seen command), driven by pgbench -M prepared over
TCP. Redis: a claim with SET NX under appendfsync always, driven by redis-benchmark.
Each server is a throwaway one: started on loopback in a temporary folder with fsync on.

The bench pairs each peer run with a run of the eonce path it is compared with (A B A B),
so the servers outlive one invocation of this script:

  peers.py start --state DIR     starts both servers, prefills and warms them up, and
                                 writes DIR/state.json (stops what it started on failure)
  peers.py measure --state DIR postgres|redis first_seen|duplicate CLIENTS --seconds S
                                 one run; prints "ops_per_s p50_us" on one line
  peers.py stop --state DIR      stops both servers and removes DIR (idempotent)
"""
import argparse
import glob
import json
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

ARGS = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ARGS.add_argument("action", choices=("start", "measure", "stop"))
ARGS.add_argument("what", nargs="*", help="measure: PEER FLOW CLIENTS")
ARGS.add_argument("--state", required=True, help="the servers' folder (made by start)")
ARGS.add_argument("--clients", default="1,16,64", help="start: client counts to warm up at")
ARGS.add_argument("--seconds", type=float, default=2.0, help="measure: length of the run")
ARGS.add_argument("--prefill", type=int, default=100_000, help="committed keys for duplicates")

# Redis first-seen keys come from 10^9 (redis-benchmark's -r wraps above 2^31: every SET
# would hit one key); duplicates from a keyspace of this many, all present after start.
REDIS_NEW_KEYSPACE = 10**9
REDIS_DUPLICATE_KEYSPACE = 1000
# redis-benchmark runs a number of requests, not a time: a run's count is the last run's
# rate (kept in the state folder) times the seconds asked for; the first's from these.
REDIS_RATE_GUESS = {1: 4_000, 16: 25_000, 64: 45_000}
MAX_REDIS_REQUESTS = 2_000_000  # a bound on one run, whatever the last rate was

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
             "-T", str(max(1, int(round(seconds)))), "-f", path, "-l", "--log-prefix",
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


def write_state(state_dir, state):
    with open(os.path.join(state_dir, "state.json"), "w") as f:
        json.dump(state, f)


def read_state(state_dir):
    try:
        with open(os.path.join(state_dir, "state.json")) as f:
            return json.load(f)
    except FileNotFoundError:
        return {}


def start(options):
    os.makedirs(options.state, exist_ok=False)
    clients = [int(c) for c in options.clients.split(",")]
    state = {"prefill": options.prefill}
    try:
        pg = Postgres(options.state)
        pg.start()
        state["postgres"] = {"bin": pg.bin, "dir": pg.dir, "port": pg.port, "prefix": pg.prefix,
                             "pid": pg.server.pid}
        write_state(options.state, state)
        pg.sql(TABLE)
        pg.sql(PREFILL.format(prefill=options.prefill))
        redis = Redis(options.state)
        redis.start()
        state["redis"] = {"port": redis.port, "pid": redis.server.pid}
        write_state(options.state, state)
        redis.bench(16, 20 * REDIS_DUPLICATE_KEYSPACE, REDIS_DUPLICATE_KEYSPACE)
        for c in clients:  # warm-ups: the first runs after a start are slow
            for flow in ("first_seen", "duplicate"):
                measure(options.state, state, "postgres", flow, c, 1)
                measure(options.state, state, "redis", flow, c, 0.5)
        print("peers: Postgres on 127.0.0.1:%d, Redis on 127.0.0.1:%d" %
              (pg.port, redis.port), flush=True)
    except BaseException:
        stop_all(options.state)
        raise


def postgres_from(state_dir, state):
    pg = Postgres.__new__(Postgres)
    pg.bin, pg.dir, pg.port = state["bin"], state["dir"], state["port"]
    pg.prefix, pg.server = state["prefix"], None
    return pg


def redis_from(state_dir, state):
    redis = Redis.__new__(Redis)
    redis.dir, redis.port, redis.server = os.path.join(state_dir, "redis"), state["port"], None
    return redis


def measure(state_dir, state, peer, flow, clients, seconds):
    if peer == "postgres":
        script = FIRST_SEEN if flow == "first_seen" else DUPLICATE.format(
            prefill=state["prefill"])
        return postgres_from(state_dir, state["postgres"]).bench(script, clients, seconds)
    redis = redis_from(state_dir, state["redis"])
    rate_file = os.path.join(state_dir, "redis-%s-%d.rate" % (flow, clients))
    try:
        with open(rate_file) as f:
            rate = float(f.read())
    except (FileNotFoundError, ValueError):
        rate = REDIS_RATE_GUESS.get(clients, 25_000) * (2 if flow == "duplicate" else 1)
    n = int(min(MAX_REDIS_REQUESTS, max(1000, rate * seconds)))
    if flow == "first_seen":
        before = redis.keys()
        result = redis.bench(clients, n, REDIS_NEW_KEYSPACE, "new-%d" % time.time_ns())
        if redis.keys() - before < 0.99 * n:
            raise RuntimeError("redis: the SETs did not create new keys; not first seen")
    else:
        result = redis.bench(clients, n, REDIS_DUPLICATE_KEYSPACE)
    with open(rate_file, "w") as f:
        f.write(str(result["ops_per_s"]))
    return result


def gone(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    # A zombie (a child of this very process) is gone too.
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, IndexError):
        return True


def end(pid, sig):
    """Sends `sig`, and SIGKILL if the process is still there after 30 s."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return
    for _ in range(300):
        if gone(pid):
            return
        time.sleep(0.1)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def stop_all(state_dir):
    state = read_state(state_dir)
    pg = state.get("postgres")
    if pg:
        # The postmaster's own pid (under runuser, the one started is runuser's).
        try:
            with open(os.path.join(pg["dir"], "data", "postmaster.pid")) as f:
                end(int(f.readline()), signal.SIGINT)  # a fast shutdown
        except (FileNotFoundError, ValueError):
            pass
        end(pg["pid"], signal.SIGTERM)
    if state.get("redis"):
        end(state["redis"]["pid"], signal.SIGTERM)
    shutil.rmtree(state_dir, ignore_errors=True)


def main():
    options = ARGS.parse_intermixed_args()
    if options.action == "start":
        start(options)
    elif options.action == "stop":
        stop_all(options.state)
    else:
        if len(options.what) != 3 or options.what[0] not in ("postgres", "redis") or \
                options.what[1] not in ("first_seen", "duplicate"):
            sys.exit("peers: measure PEER FLOW CLIENTS (postgres|redis, first_seen|duplicate)")
        state = read_state(options.state)
        if options.what[0] not in state:
            sys.exit("peers: no %s in %s (peers.py start first)" % (options.what[0], options.state))
        result = measure(options.state, state, options.what[0], options.what[1],
                         int(options.what[2]), options.seconds)
        print("%.1f %.1f" % (result["ops_per_s"], result["p50_us"]))


if __name__ == "__main__":
    main()
