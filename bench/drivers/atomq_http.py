"""atomq over HTTP: a served node with a tenant, and the client threads that send and drain it.

The whole path a user's client takes (gunicorn workers, the API, the node's
own Valkey), with the diagnostics that say where a request's time goes:
which worker holds each connection, and the CPU each party spent.
"""

from __future__ import annotations

import os
import shlex
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import redis
import requests

from atomq.client import AtomqClient

from .serve_node import BenchError, ServeNode, check, expect, keep_alive_session, progress
from .workload import BATCH, PAYLOAD_BYTES, batch_dispenser, threaded_phase


class HttpNode(ServeNode):
    """The bench's ``atomq serve``, with a tenant for the clients.

    It runs its own embedded Valkey; the bench reaches that Valkey through the
    socket and password the node wrote in its data directory, to rewrite the
    AOF before each timed phase as it does for its own.
    """

    def __init__(self, http_workers: int | None) -> None:
        # No listeners here: execution workers (serve starts 2 by default) would only take CPU.
        super().__init__("atomq-bench-http-", http_workers, workers=0)
        self.valkey: redis.Redis | None = None
        self.valkey_pid = 0
        self.tenant_key = ""
        self.api: requests.Session | None = None

    def start(self, timeout: float = 60.0) -> None:
        super().start(timeout)
        self.api = requests.Session()
        self.api.headers["Connection"] = "close"  # only the client threads hold keep-alive connections
        created = expect(self.api.post(f"{self.base}/v1/tenants", json={"name": "bench"},
                                       headers={"Authorization": f"Bearer {self.owner_key}"}, timeout=30),
                         201, "creating the bench tenant")
        self.tenant_key = created["api_key"]
        self.api.headers["Authorization"] = f"Bearer {self.tenant_key}"
        self.valkey = self._valkey_client()
        self.valkey_pid = int(self.valkey.info("server")["process_id"])

    def stop(self, timeout: float = 40.0) -> None:
        try:
            if self.api is not None:
                self.api.close()
            if self.valkey is not None:
                self.valkey.close()
        finally:
            super().stop(timeout)

    def _valkey_client(self) -> redis.Redis:
        vdir = self.data_dir / "valkey"
        sock = next((shlex.split(line)[1] for line in (vdir / "valkey.conf").read_text().splitlines()
                     if line.startswith("unixsocket ")), None)
        check(sock is not None, "cannot find the node's Valkey socket in its valkey.conf")
        return redis.Redis(unix_socket_path=sock, password=(vdir / "password").read_text().strip())

    # the API, untimed

    def put_queue(self, name: str, **fields: Any) -> None:
        """Creates point-to-point queue ``name`` with ``fields`` (``ack_timeout_s=...``) beside its model."""
        expect(self._api().put(f"{self.base}/v1/queues/{name}", json={"model": "point_to_point", **fields},
                               timeout=30), 201, f"creating queue {name}")

    def queue_info(self, name: str) -> dict[str, Any]:
        info: dict[str, Any] = expect(self._api().get(f"{self.base}/v1/queues/{name}", timeout=30), 200,
                                      f"reading queue {name}")
        return info

    def delete_queue(self, name: str) -> None:
        expect(self._api().delete(f"{self.base}/v1/queues/{name}", timeout=30), 204, f"deleting queue {name}")

    def _api(self) -> requests.Session:
        if self.api is None:
            raise BenchError("atomq serve is not started")
        return self.api

    # who serves the clients

    def worker_pids(self) -> list[int]:
        """The gunicorn worker processes: the node's children, less its Valkey."""
        if self.proc is None:
            return []
        pids = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                with open(f"/proc/{entry}/comm") as f:
                    comm = f.read().strip()
            except (OSError, ValueError, IndexError):
                continue
            if ppid == self.proc.pid and not comm.startswith("valkey"):
                pids.append(int(entry))
        return sorted(pids)

    def connections_by_worker(self) -> dict[int, int]:
        """Established client connections each worker holds (from /proc; empty where that is unreadable)."""
        port = f":{self.port:04X}"
        inodes: set[str] = set()
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            try:
                with open(table) as f:
                    rows = f.read().splitlines()[1:]
            except OSError:
                continue
            for row in rows:
                fields = row.split()
                if len(fields) > 9 and fields[1].endswith(port) and fields[3] == "01":
                    inodes.add(fields[9])
        counts: dict[int, int] = {}
        for pid in self.worker_pids():
            counts[pid] = 0
            try:
                fds = os.listdir(f"/proc/{pid}/fd")
            except OSError:
                continue
            for fd in fds:
                try:
                    link = os.readlink(f"/proc/{pid}/fd/{fd}")
                except OSError:
                    continue
                if link.startswith("socket:[") and link[8:-1] in inodes:
                    counts[pid] += 1
        return counts

    def report_connections(self) -> None:
        counts = self.connections_by_worker()
        if counts:
            progress("    client connections per server worker: "
                     + ", ".join(f"pid {pid}: {n}" for pid, n in counts.items()))

    def cpu_seconds(self) -> dict[str, float]:
        """CPU time (user + system) so far of this process (the clients), the node's workers and its Valkey."""
        out = {"client": time.process_time(), "workers": 0.0, "valkey": 0.0}
        tick = os.sysconf("SC_CLK_TCK")
        for pid in self.worker_pids() + ([self.valkey_pid] if self.valkey_pid else []):
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            out["valkey" if pid == self.valkey_pid else "workers"] += (int(fields[11]) + int(fields[12])) / tick
        return out

    def cpu_report(self) -> tuple[Callable[[], None], Callable[[float, int, int], None]]:
        """A phase's on_start (which also says who holds the connections) and, after it, a report of
        the CPU each party spent per request: a diagnostic, on stderr."""
        before: dict[str, float] = {}

        def on_start() -> None:
            self.report_connections()
            before.update(self.cpu_seconds())

        def report(seconds: float, requests_made: int, clients: int) -> None:
            after = self.cpu_seconds()
            if before and requests_made:
                per = {k: (after[k] - before[k]) / requests_made * 1e3 for k in after}
                progress(f"    per request ({requests_made}): wall {seconds * clients / requests_made * 1e3:.2f} ms "
                         f"a client; CPU: client {per['client']:.2f} ms, server workers {per['workers']:.2f} ms, "
                         f"node's Valkey {per['valkey']:.2f} ms")

        return on_start, report


@dataclass(frozen=True)
class Target:
    """Where a client thread sends and gets: a node's base URL, a tenant's key and its queue."""

    base: str
    key: str
    queue: str


@contextmanager
def batch_sender(phase: str, target: Target) -> Iterator[Callable[[list[dict[str, Any]]], list[str]]]:
    """How one sending thread sends a batch of messages and gets their ids: a requests session
    posting them (``http_send``), or atomq's own Python client (``client_send``: ``AtomqClient.send``,
    what a tenant's Python producer runs). Its connection is opened here, before the phase is timed."""
    if phase == "client_send":
        with AtomqClient(target.base, target.key, timeout=60) as client:
            client.ready()
            yield lambda messages: client.send(target.queue, messages)
        return
    url = f"{target.base}/v1/queues/{target.queue}/messages"
    with keep_alive_session(target.base, target.key) as s:
        yield lambda messages: expect(s.post(url, json={"messages": messages}, timeout=60), 201, phase)["ids"]


def send_phase(targets: list[Target], n: int, text: str, clients: int,
               on_start: Callable[[], None] | None = None, phase: str = "http_send") -> tuple[float, list[str]]:
    """``clients`` threads, each with its own keep-alive connection to ``targets[i % len(targets)]``,
    send 100 messages a request (through ``batch_sender(phase)``) until n are sent between them."""
    messages = [{"documents": [{"data": text}]} for _ in range(BATCH)]
    take = batch_dispenser(n)

    def work(i: int, ready: Callable[[], Any], stop: threading.Event) -> tuple[float, list[str]]:
        with batch_sender(phase, targets[i % len(targets)]) as send:
            ready()
            ids: list[str] = []
            while not stop.is_set():
                batch = take()
                if batch is None:
                    break
                size = batch[1]
                got = send(messages if size == BATCH else messages[:size])
                check(len(got) == size, f"{phase}: a send of {size} answered {len(got)} ids")
                ids.extend(got)
            return time.perf_counter(), ids

    seconds, parts = threaded_phase(phase, clients, work, on_start=on_start)
    return seconds, [i for part in parts for i in part]


def get_ack_phase(targets: list[Target], clients: int, on_start: Callable[[], None] | None = None
                  ) -> tuple[float, list[str], int, int]:
    """``clients`` threads each get (max 100) and ack (ids) on their target's queue until a get finds
    nothing.

    Returns seconds, every id delivered (duplicates kept, for the check), the
    count the acks acknowledged and the requests made.
    """

    def work(i: int, ready: Callable[[], Any], stop: threading.Event) -> tuple[float, tuple[list[str], int, int]]:
        target = targets[i % len(targets)]
        get_url = f"{target.base}/v1/queues/{target.queue}/get"
        ack_url = f"{target.base}/v1/queues/{target.queue}/ack"
        with keep_alive_session(target.base, target.key) as s:
            ready()
            delivered: list[str] = []
            acked = calls = 0
            while not stop.is_set():
                calls += 1
                got = expect(s.post(get_url, json={"max": BATCH}, timeout=60), 200, "http_get_ack: get")["messages"]
                if not got:
                    break
                ids = [m["id"] for m in got]
                docs = got[0]["documents"]
                check(len(docs) == 1 and len(docs[0].get("data", "")) == PAYLOAD_BYTES,
                      f"delivery {ids[0]} does not carry one {PAYLOAD_BYTES}-character document")
                check(all(m["delivery_count"] == 1 for m in got), "http_get_ack: a message was delivered twice")
                calls += 1
                done = expect(s.post(ack_url, json={"ids": ids}, timeout=60), 200, "http_get_ack: ack")["acked"]
                check(done == len(ids), f"http_get_ack: an ack of {len(ids)} ids acknowledged {done}")
                delivered.extend(ids)
                acked += done
            return time.perf_counter(), (delivered, acked, calls)

    seconds, parts = threaded_phase("http_get_ack", clients, work, on_start=on_start)
    return (seconds, [i for ids, _, _ in parts for i in ids], sum(a for _, a, _ in parts),
            sum(c for _, _, c in parts))


@contextmanager
def batch_taker(phase: str, target: Target) -> Iterator[Callable[[list[str]], Any]]:
    """How one consuming thread takes a batch (max 100) acking the batch before it: a requests
    session posting the get (``http_consume``), or atomq's own Python client (``client_consume``:
    ``AtomqClient.take``, what a tenant's Python consumer runs). Its connection is opened here,
    before the phase is timed."""
    if phase == "client_consume":
        with AtomqClient(target.base, target.key, timeout=60) as client:
            client.ready()
            yield lambda previous: client.take(target.queue, BATCH, 0, ack_receipts=previous or None)
        return
    url = f"{target.base}/v1/queues/{target.queue}/get"
    with keep_alive_session(target.base, target.key) as s:
        def take(previous: list[str]) -> Any:
            body: dict[str, Any] = {"max": BATCH}
            if previous:
                body["ack"] = {"receipts": previous}
            return expect(s.post(url, json=body, timeout=60), 200, f"{phase}: get")
        yield take


def consume_phase(targets: list[Target], clients: int, on_start: Callable[[], None] | None = None,
                  phase: str = "http_consume") -> tuple[float, list[str], int, int]:
    """``clients`` threads each take (max 100) from their target's queue, each take acking the batch
    before it (``"ack": {"receipts": [...]}``), until one finds nothing: one request a batch,
    through ``batch_taker(phase)``.

    Returns what ``get_ack_phase`` does.
    """

    def work(i: int, ready: Callable[[], Any], stop: threading.Event) -> tuple[float, tuple[list[str], int, int]]:
        with batch_taker(phase, targets[i % len(targets)]) as take:
            ready()
            delivered: list[str] = []
            acked = calls = 0
            previous: list[str] = []
            while not stop.is_set():
                calls += 1
                answer = take(previous)
                if previous:
                    check(answer["acked"] == len(previous),
                          f"{phase}: a get acking {len(previous)} receipts acked {answer['acked']}")
                    acked += answer["acked"]
                got = answer["messages"]
                if not got:
                    break
                docs = got[0]["documents"]
                check(len(docs) == 1 and len(docs[0].get("data", "")) == PAYLOAD_BYTES,
                      f"delivery {got[0]['id']} does not carry one {PAYLOAD_BYTES}-character document")
                check(all(m["delivery_count"] == 1 for m in got), f"{phase}: a message was delivered twice")
                delivered.extend(m["id"] for m in got)
                previous = [m["receipt"] for m in got]
            return time.perf_counter(), (delivered, acked, calls)

    seconds, parts = threaded_phase(phase, clients, work, on_start=on_start)
    return (seconds, [i for ids, _, _ in parts for i in ids], sum(a for _, a, _ in parts),
            sum(c for _, _, c in parts))


def http_consume(node: HttpNode, queue: str, clients: int,
                 phase: str = "http_consume") -> tuple[float, list[str], int]:
    """``consume_phase`` on one queue of the node, over requests sessions (``http_consume``) or atomq's
    own client (``client_consume``): seconds, every id delivered and the count acked."""
    on_start, report = node.cpu_report()
    seconds, delivered, acked, calls = consume_phase([Target(node.base, node.tenant_key, queue)], clients, on_start,
                                                     phase)
    report(seconds, calls, clients)
    return seconds, delivered, acked


def http_send(node: HttpNode, queue: str, n: int, text: str, clients: int,
              phase: str = "http_send") -> tuple[float, list[str]]:
    """``clients`` threads send 100 messages a request to one queue of the node until n are sent:
    over requests sessions (``http_send``) or atomq's own client (``client_send``)."""
    on_start, report = node.cpu_report()
    seconds, ids = send_phase([Target(node.base, node.tenant_key, queue)], n, text, clients, on_start, phase)
    report(seconds, -(-n // BATCH), clients)
    return seconds, ids


def http_get_ack(node: HttpNode, queue: str, clients: int) -> tuple[float, list[str], int]:
    """``clients`` threads each get (max 100) and ack (ids) on the same queue until a get finds nothing.

    Returns seconds, every id delivered (duplicates kept, for the check) and
    the count the acks acknowledged.
    """
    on_start, report = node.cpu_report()
    seconds, delivered, acked, calls = get_ack_phase([Target(node.base, node.tenant_key, queue)], clients, on_start)
    report(seconds, calls, clients)
    return seconds, delivered, acked
