#!/usr/bin/python3
"""A producer in Python: commands through the outbox agent, effectively once.

It opens two ledger accounts and waits for both, sends transfers and one overdraft that the ledger must
reject, and follows every outcome with Watch, applying each one once to a projection (a
local view of the balances). Errors are read with gRPC's standard richer error model:
the google.rpc.Status in grpc-status-details-bin, with its ErrorInfo, RetryInfo and, for
business rejections, the eonce.v1.Rejection.

    producer.py --agent=127.0.0.1:7000 --transfers=5

Every Enqueue carries W3C trace context (the `traceparent` gRPC metadata): one trace per
run (--traceparent, or a fresh sampled one), a fresh span id per call. The agent keeps it
with the command across retries, and the agent's, the sidecar's and the ledger's log lines
and records name its trace id (docs/operations.md, "Tracing").

Stubs: generated from proto/ by //examples/python:producer_stubs (bazel-bin), or any
folder named by --stubs. Exit codes: 0 every outcome known, 1 not, 2 bad arguments.
"""

import argparse
import os
import queue
import random
import sys
import threading
import time
import uuid


def _find_stubs(explicit):
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = [explicit] if explicit else []
    candidates += [
        os.path.join(here, "gen"),  # Bazel runfiles
        os.path.join(here, "..", "..", "bazel-bin", "examples", "python", "gen"),
    ]
    for folder in candidates:
        if folder and os.path.exists(os.path.join(folder, "eonce", "v1", "agent_pb2.py")):
            return folder
    sys.exit("producer: no generated stubs; build //examples/python:producer_stubs "
             "(./eonce up does) or pass --stubs")


ARGS = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ARGS.add_argument("--agent", default="127.0.0.1:7000", help="the agent's address")
ARGS.add_argument("--transfers", type=int, default=5, help="transfers of 1 from a to b")
ARGS.add_argument("--timeout_s", type=float, default=60, help="give up after this long")
ARGS.add_argument("--stubs", default="", help="folder of the generated Python stubs")
ARGS.add_argument("--prefix", default="py", help="prefix of this run's account names")
ARGS.add_argument("--traceparent", default="",
                  help="W3C traceparent of this run (00-<32 hex>-<16 hex>-<2 hex>); "
                       "empty: a fresh sampled one")
OPTIONS = ARGS.parse_args()
if OPTIONS.transfers < 0 or OPTIONS.transfers > 10_000:
    ARGS.error("--transfers must be within 0..10000")
sys.path.insert(0, _find_stubs(OPTIONS.stubs))

import grpc  # noqa: E402
from eonce.ledger.v1 import ledger_pb2  # noqa: E402
from eonce.v1 import agent_pb2, agent_pb2_grpc, command_pb2  # noqa: E402
from google.rpc import error_details_pb2, status_pb2  # noqa: E402

FINAL = {agent_pb2.ACKED, agent_pb2.REJECTED, agent_pb2.CONFLICT, agent_pb2.DEAD_LETTERED,
         agent_pb2.EXPIRED}
RETRYABLE = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
             grpc.StatusCode.RESOURCE_EXHAUSTED}
MAX_ATTEMPTS = 6


class ErrorDetails:
    """What the standard error model says about a failed call."""

    def __init__(self, code, message, details_bin):
        self.code, self.message = code, message
        self.reason, self.domain, self.metadata = "", "", {}
        self.retry_after_s = None
        self.rejection = None
        if not details_bin:
            return
        status = status_pb2.Status()
        status.ParseFromString(details_bin)
        for detail in status.details:
            info = error_details_pb2.ErrorInfo()
            retry = error_details_pb2.RetryInfo()
            rejection = command_pb2.Rejection()
            if detail.Unpack(info):
                self.reason, self.domain = info.reason, info.domain
                self.metadata = dict(info.metadata)
            elif detail.Unpack(retry):
                self.retry_after_s = retry.retry_delay.ToTimedelta().total_seconds()
            elif detail.Unpack(rejection):
                self.rejection = rejection

    @staticmethod
    def of_rpc_error(error):
        details = dict(error.trailing_metadata() or ()).get("grpc-status-details-bin", b"")
        return ErrorDetails(error.code(), error.details(), details)

    def __str__(self):
        text = f"{self.code.name if hasattr(self.code, 'name') else self.code} {self.reason}"
        if self.retry_after_s is not None:
            text += f" (retry after {int(self.retry_after_s * 1000)} ms)"
        return text


def new_trace(given):
    """This run's trace: (trace id, flags), from --traceparent or fresh and sampled."""
    if not given:
        return os.urandom(16).hex(), "01"
    parts = given.split("-")
    if len(parts) != 4 or len(parts[1]) != 32 or len(parts[2]) != 16:
        ARGS.error("--traceparent: 00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>")
    return parts[1], parts[3]


TRACE_ID, TRACE_FLAGS = new_trace(OPTIONS.traceparent)


def traceparent():
    """A child span of this run's trace for one call: the same trace id, a fresh span id.
    Trace context is not part of the command: a retry under another span is the same
    command, and the agent keeps the first one's."""
    return f"00-{TRACE_ID}-{os.urandom(8).hex()}-{TRACE_FLAGS}"


def enqueue(stub, command):
    """Enqueues with retries. The command id is fixed before the first attempt, so a
    retry after a lost answer is the same command, never a second one."""
    for attempt in range(1, MAX_ATTEMPTS + 1):
        try:
            return stub.Enqueue(agent_pb2.EnqueueRequest(command=command), timeout=5,
                                metadata=[("traceparent", traceparent())])
        except grpc.RpcError as error:
            why = ErrorDetails.of_rpc_error(error)
            if error.code() not in RETRYABLE or attempt == MAX_ATTEMPTS:
                raise SystemExit(f"producer: gave up on {command.command_id}: {why}")
            delay = why.retry_after_s if why.retry_after_s is not None else 0.05 * 2 ** attempt
            print(f"producer: {command.command_id}: {why}; retrying", flush=True)
            time.sleep(min(delay, 5) * (0.5 + random.random() / 2))
    return None


def command(method, request, entity_id, command_id=None):
    c = command_pb2.Command(command_id=command_id or uuid.uuid4().hex,
                            target_method=method, request=request.SerializeToString())
    c.entity.type, c.entity.id = "account", entity_id
    return c


class Projection:
    """The producer's own view of the balances, built from outcomes. Applying an outcome
    twice changes nothing: each command id is applied once."""

    def __init__(self):
        self.applied = set()
        self.states = {}
        self.balances = {}
        self.rejections = {}

    def apply(self, record):
        cid = record.command.command_id
        if cid in self.applied:
            return False
        self.applied.add(cid)
        self.states[cid] = record.state
        method = record.command.target_method
        if record.state == agent_pb2.ACKED and method.endswith("/OpenAccount"):
            req = ledger_pb2.OpenAccountRequest.FromString(record.command.request)
            self.balances[req.id] = self.balances.get(req.id, 0) + req.initial_balance
        elif record.state == agent_pb2.ACKED and method.endswith("/Transfer"):
            req = ledger_pb2.TransferRequest.FromString(record.command.request)
            # Outcomes come in any order; deltas add up the same whatever the order.
            source = getattr(req, "from")
            self.balances[source] = self.balances.get(source, 0) - req.amount
            self.balances[req.to] = self.balances.get(req.to, 0) + req.amount
        elif record.state == agent_pb2.REJECTED:
            why = ErrorDetails(record.result.code, record.result.message,
                               record.result.error_details)
            self.rejections[cid] = why.rejection.reason if why.rejection else why.reason
        return True


def main():
    print(f"trace: {TRACE_ID}", flush=True)
    channel = grpc.insecure_channel(OPTIONS.agent)
    stub = agent_pb2_grpc.AgentStub(channel)
    events = queue.Queue()
    watch = stub.Watch(agent_pb2.WatchRequest())
    watch.initial_metadata()  # the agent sends it once subscribed: no change is missed

    def follow():
        try:
            for event in watch:
                events.put(event.command_id)
        except grpc.RpcError:
            pass  # cancelled at the end, or the agent went away: polling covers it

    threading.Thread(target=follow, daemon=True).start()

    projection = Projection()
    deadline = time.monotonic() + OPTIONS.timeout_s

    def settle(pending):
        """Waits until each command of `pending` is final (removing it), or the deadline."""
        while pending and time.monotonic() < deadline:
            try:
                changed = {events.get(timeout=1.0)}
            except queue.Empty:
                changed = set(pending)  # nothing heard for a second: look at all of them
            for cid in changed & pending:
                record = stub.Get(agent_pb2.GetRequest(command_id=cid), timeout=5)
                if record.state in FINAL:
                    projection.apply(record)
                    projection.apply(record)  # a second delivery of the same outcome: no change
                    pending.discard(cid)

    # The accounts first: a transfer is ordered behind the earlier commands of its own
    # entity (the account it debits), not behind the opening of the account it credits, so
    # sent at once it could reach the ledger before that account exists.
    a, b = f"{OPTIONS.prefix}-a", f"{OPTIONS.prefix}-b"
    opens = set()
    for account, balance in ((a, 1000), (b, 0)):
        open_request = ledger_pb2.OpenAccountRequest(id=account, initial_balance=balance)
        opens.add(enqueue(stub, command("/eonce.ledger.v1.Ledger/OpenAccount", open_request,
                                        account, command_id=f"open-{account}"))
                  .record.command.command_id)
    settle(opens)

    sent = []
    for _ in range(OPTIONS.transfers):
        t = ledger_pb2.TransferRequest(to=b, amount=1)
        setattr(t, "from", a)
        sent.append(enqueue(stub, command("/eonce.ledger.v1.Ledger/Transfer", t, a)))
    overdraft = ledger_pb2.TransferRequest(to=a, amount=10**9)
    setattr(overdraft, "from", b)
    sent.append(enqueue(stub, command("/eonce.ledger.v1.Ledger/Transfer", overdraft, b)))
    pending = {r.record.command.command_id for r in sent} | opens
    settle(pending)
    watch.cancel()

    acked = sum(1 for state in projection.states.values() if state == agent_pb2.ACKED)
    print(f"outcomes: acked {acked}, rejected {len(projection.rejections)} "
          f"({', '.join(sorted(set(projection.rejections.values())))}), pending {len(pending)}")
    print(f"projection: {a}={projection.balances.get(a)} {b}={projection.balances.get(b)}")
    return 0 if not pending else 1


if __name__ == "__main__":
    sys.exit(main())
