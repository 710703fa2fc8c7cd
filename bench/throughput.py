#!/usr/bin/env python3
"""Throughput of the queue core, the HTTP API and RabbitMQ against raw Redis streams.

Phases over --messages messages of one 1 KiB document (payload) each, in
batches of 100:

  raw_send          redis-py pipelined XADD, 100 per round trip (transaction=False)
  platform_send     QueueServer.send of 100 messages per call
  http_send         POST /v1/queues/Q/messages of 100 messages, 4 client threads
  raw_get_ack       XREADGROUP COUNT 100 + XACK of the previous batch in one pipeline
  platform_get_ack  QueueServer.get(max_messages=100) + ack(ids=...) until drained
  http_get_ack      POST .../get {"max": 100} + POST .../ack {"ids": [...]},
                    4 client threads on the same queue, until drained
  rabbitmq_send     pika, 4 threads each with its own connection: persistent
                    messages to a durable queue, publisher confirms awaited per 100
  rabbitmq_get_ack  pika, 4 consumers each with its own connection: prefetch 100,
                    basic_ack(multiple=True) every 100, until drained

The phases run as one round, in that order, --repeat rounds in a row (so a
machine whose speed drifts mid-run affects both sides of a ratio alike); the
median of the rounds is reported for each phase, and each ratio is the
median of the rounds' ratios (http_send_ratio = http_send / raw_send of the
same round).
Each round uses a fresh stream, fresh queues and a fresh RabbitMQ queue: the
send phase fills one, the get+ack phase drains it. Only the loops are timed
(time.perf_counter); creating, checking and deleting are not. Before each
timed Valkey phase that Valkey's AOF is rewritten (BGREWRITEAOF, waited
for), so no automatic rewrite - a fork and a child busy on the same CPUs -
lands inside one phase and not another.

The core phases use an EmbeddedValkey (AOF, appendfsync everysec) in a fresh
temporary data directory. The HTTP phases start `atomq serve` (its defaults:
gunicorn threaded workers, its own embedded Valkey with AOF everysec) on a
free loopback port in another temporary data directory, with a fresh owner
key and a tenant made through the API; the clients are threads of this
process, each with its own keep-alive requests.Session (JSON bodies). The
RabbitMQ phases run where --amqp-url answers (and pika is installed: pip
install 'atomq[bench]'); otherwise a line says they were skipped and their
figures are null. Everything started or made is stopped or removed at the
end, also on an error or Ctrl-C.

Output: a line per phase (median msg/s and each round), per ratio and per
aim on stdout, progress on stderr, and as the LAST stdout line one JSON
object with raw_send, platform_send, raw_get_ack, platform_get_ack, http_send,
http_get_ack, rabbitmq_send, rabbitmq_get_ack (medians, msg/s; null when a
phase did not run), platform_send_ratio, platform_get_ack_ratio,
http_send_ratio, http_get_ack_ratio, http_send_vs_rabbitmq_send, plus
messages, batch, repeat, clients, python, valkey, rabbitmq. Exit status 1
when a correctness check fails (each get+ack phase must consume exactly the
N messages sent, each once), 130 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
import uuid
from typing import Any, Callable

import redis
import requests

from atomq.platform import OutgoingDocument, OutgoingMessage, QueueServer
from atomq.platform.connection import redact_url
from atomq.platform.embedded import EmbeddedValkey
from drivers.serve_node import BenchError, ServeNode, expect, progress, stop_on_sigterm

PAYLOAD_BYTES = 1024
BATCH = 100
CLIENTS = 4
CORE_PHASES = ("raw_send", "platform_send", "raw_get_ack", "platform_get_ack")
HTTP_PHASES = ("http_send", "http_get_ack")
AMQP_PHASES = ("rabbitmq_send", "rabbitmq_get_ack")
ORDER = ("raw_send", "platform_send", "http_send", "raw_get_ack", "platform_get_ack", "http_get_ack",
         "rabbitmq_send", "rabbitmq_get_ack")
RATIOS = (("platform_send_ratio", "platform_send", "raw_send"),
          ("platform_get_ack_ratio", "platform_get_ack", "raw_get_ack"),
          ("http_send_ratio", "http_send", "raw_send"),
          ("http_get_ack_ratio", "http_get_ack", "raw_get_ack"),
          ("http_send_vs_rabbitmq_send", "http_send", "rabbitmq_send"))
AIMS = (("http_send_ratio", 0.3), ("http_send_vs_rabbitmq_send", 2.0))
DEFAULT_AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/"
PHASE_DEADLINE_S = 300.0
"""A threaded phase that has not finished by then has hung: it fails instead of waiting for ever."""


def check(condition: bool, what: str) -> None:
    if not condition:
        raise BenchError(what)


# -- raw Redis streams ----------------------------------------------------------


def raw_send(client: redis.Redis, stream: str, n: int, payload: bytes) -> tuple[float, list[bytes]]:
    """Pipelined XADD, BATCH per round trip; returns seconds and the entry ids."""
    ids: list[bytes] = []
    pipe = client.pipeline(transaction=False)
    t0 = time.perf_counter()
    sent = 0
    while sent < n:
        size = min(BATCH, n - sent)
        for _ in range(size):
            pipe.xadd(stream, {b"d": payload})
        ids.extend(pipe.execute())
        sent += size
    elapsed = time.perf_counter() - t0
    return elapsed, ids


def raw_get_ack(client: redis.Redis, stream: str, group: str) -> tuple[float, set[bytes], int]:
    """XREADGROUP COUNT BATCH plus XACK of the previous batch, one pipeline a round trip.

    Returns seconds, the distinct ids read, and how many ids XACK acknowledged.
    """
    seen: set[bytes] = set()
    read = acked = 0
    prev: list[bytes] = []
    pipe = client.pipeline(transaction=False)
    t0 = time.perf_counter()
    while True:
        pipe.xreadgroup(group, "c1", {stream: ">"}, count=BATCH)
        if prev:
            pipe.xack(stream, group, *prev)
        replies = pipe.execute()
        if prev:
            acked += replies[1]
        entries = replies[0][0][1] if replies[0] else []
        if not entries:
            break
        prev = [e[0] for e in entries]
        seen.update(prev)
        read += len(prev)
    elapsed = time.perf_counter() - t0
    check(read == len(seen), f"raw_get_ack read {read} entries but only {len(seen)} distinct ids")
    return elapsed, seen, acked


# -- the platform ---------------------------------------------------------------


def platform_send(qs: QueueServer, tenant: str, queue: str, n: int,
                  batch: list[OutgoingMessage]) -> tuple[float, list[str]]:
    ids: list[str] = []
    t0 = time.perf_counter()
    sent = 0
    while sent < n:
        size = min(BATCH, n - sent)
        ids.extend(qs.send(tenant, queue, batch if size == BATCH else batch[:size]))
        sent += size
    elapsed = time.perf_counter() - t0
    return elapsed, ids


def platform_get_ack(qs: QueueServer, tenant: str, queue: str) -> tuple[float, set[str], int]:
    """get(max_messages=BATCH) + ack(ids=...) until a get returns nothing."""
    seen: set[str] = set()
    read = acked = 0
    t0 = time.perf_counter()
    while True:
        deliveries = qs.get(tenant, queue, max_messages=BATCH)
        if not deliveries:
            break
        ids = [d.id for d in deliveries]
        first = deliveries[0].documents
        check(len(first) == 1 and len(first[0].data) == PAYLOAD_BYTES,
              f"delivery {ids[0]} does not carry one {PAYLOAD_BYTES}-byte document")
        seen.update(ids)
        read += len(ids)
        acked += qs.ack(tenant, queue, ids=ids)
    elapsed = time.perf_counter() - t0
    check(read == len(seen), f"platform_get_ack delivered {read} messages but only {len(seen)} distinct ids")
    return elapsed, seen, acked


# -- several client threads -----------------------------------------------------


def batch_dispenser(n: int) -> Callable[[], tuple[int, int] | None]:
    """Hands out (first message, size) of the next batch to whichever thread asks; None when all are out."""
    lock = threading.Lock()
    starts = iter(range(0, n, BATCH))

    def take() -> tuple[int, int] | None:
        with lock:
            start = next(starts, None)
        return None if start is None else (start, min(BATCH, n - start))

    return take


def threaded_phase(what: str, count: int, work: Callable[[int, Callable[[], Any], threading.Event], tuple[float, Any]],
                   on_start: Callable[[], None] | None = None) -> tuple[float, list[Any]]:
    """Runs ``work(i, ready, stop)`` in ``count`` threads and times them from a common start.

    Each thread sets itself up (connects), calls ``ready()``, which returns
    once all threads are ready, then works and returns (the perf_counter at
    which it finished, its result). The phase lasts from that common start to
    the last thread's finish. The first error in any thread fails the phase
    (the others are told to stop); a phase that hangs fails after
    PHASE_DEADLINE_S.
    """
    started: list[float] = []

    def start() -> None:
        if on_start is not None:
            on_start()
        started.append(time.perf_counter())

    barrier = threading.Barrier(count + 1, action=start, timeout=60)
    stop = threading.Event()
    results: list[Any] = [None] * count
    errors: list[BaseException] = []

    def body(i: int) -> None:
        try:
            results[i] = work(i, barrier.wait, stop)
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            errors.append(exc)
            stop.set()
            barrier.abort()

    threads = [threading.Thread(target=body, args=(i,), name=f"{what}-{i}", daemon=True) for i in range(count)]
    try:
        for t in threads:
            t.start()
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            pass  # a thread failed to set up: its error is in errors
        deadline = time.monotonic() + PHASE_DEADLINE_S
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        if any(t.is_alive() for t in threads) and not errors:
            raise BenchError(f"{what} did not finish within {PHASE_DEADLINE_S:.0f} s")
    finally:
        stop.set()
    if errors:
        exc = errors[0]
        if isinstance(exc, (BenchError, KeyboardInterrupt)):
            raise exc
        raise BenchError(f"{what}: {type(exc).__name__}: {exc}") from exc
    check(bool(started), f"{what}: the client threads never started together")
    return max(r[0] for r in results) - started[0], [r[1] for r in results]


# -- atomq serve over HTTP --------------------------------------------------------


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

    def put_queue(self, name: str) -> None:
        expect(self._api().put(f"{self.base}/v1/queues/{name}", json={"model": "point_to_point"}, timeout=30),
               201, f"creating queue {name}")

    def queue_info(self, name: str) -> dict[str, Any]:
        info: dict[str, Any] = expect(self._api().get(f"{self.base}/v1/queues/{name}", timeout=30), 200,
                                      f"reading queue {name}")
        return info

    def delete_queue(self, name: str) -> None:
        expect(self._api().delete(f"{self.base}/v1/queues/{name}", timeout=30), 204, f"deleting queue {name}")

    def client_session(self) -> requests.Session:
        return self.session(self.tenant_key)

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


def http_send(node: HttpNode, queue: str, n: int, text: str, clients: int) -> tuple[float, list[str]]:
    """``clients`` threads, each with its own keep-alive session, POST 100 messages a request until n are sent."""
    url = f"{node.base}/v1/queues/{queue}/messages"
    messages = [{"documents": [{"data": text}]} for _ in range(BATCH)]
    full = {"messages": messages}
    take = batch_dispenser(n)

    def work(i: int, ready: Callable[[], Any], stop: threading.Event) -> tuple[float, list[str]]:
        with node.client_session() as s:
            ready()
            ids: list[str] = []
            while not stop.is_set():
                batch = take()
                if batch is None:
                    break
                size = batch[1]
                body = full if size == BATCH else {"messages": messages[:size]}
                got = expect(s.post(url, json=body, timeout=60), 201, "http_send")["ids"]
                check(len(got) == size, f"http_send: a send of {size} answered {len(got)} ids")
                ids.extend(got)
            return time.perf_counter(), ids

    on_start, report = node.cpu_report()
    seconds, parts = threaded_phase("http_send", clients, work, on_start=on_start)
    report(seconds, -(-n // BATCH), clients)
    return seconds, [i for part in parts for i in part]


def http_get_ack(node: HttpNode, queue: str, clients: int) -> tuple[float, list[str], int]:
    """``clients`` threads each get (max 100) and ack (ids) on the same queue until a get finds nothing.

    Returns seconds, every id delivered (duplicates kept, for the check) and
    the count the acks acknowledged.
    """
    get_url = f"{node.base}/v1/queues/{queue}/get"
    ack_url = f"{node.base}/v1/queues/{queue}/ack"

    def work(i: int, ready: Callable[[], Any], stop: threading.Event) -> tuple[float, tuple[list[str], int, int]]:
        with node.client_session() as s:
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

    on_start, report = node.cpu_report()
    seconds, parts = threaded_phase("http_get_ack", clients, work, on_start=on_start)
    report(seconds, sum(c for _, _, c in parts), clients)
    return seconds, [i for ids, _, _ in parts for i in ids], sum(a for _, a, _ in parts)


# -- RabbitMQ through pika --------------------------------------------------------


class Amqp:
    """A RabbitMQ broker at ``url``; ``probe`` says whether one answers (and pika is there)."""

    def __init__(self, pika: Any, url: str, version: str) -> None:
        self.pika = pika
        self.url = url
        self.version = version
        self.params = pika.URLParameters(url)
        self.queues: set[str] = set()

    @classmethod
    def probe(cls, url: str) -> tuple[Amqp | None, str]:
        """(the broker, "") when it answers, else (None, why not)."""
        try:
            import pika  # optional: pip install 'atomq[bench]'
        except ImportError:
            return None, "pika is not installed (pip install 'atomq[bench]')"
        try:
            params = pika.URLParameters(url)
        except Exception as exc:  # noqa: BLE001 - any malformed URL
            return None, f"--amqp-url is not a usable AMQP URL ({type(exc).__name__}: {exc})"
        params.connection_attempts = 1
        params.socket_timeout = 3
        try:
            conn = pika.BlockingConnection(params)
        except Exception as exc:  # noqa: BLE001 - refused, timed out, bad credentials: all mean skip
            detail = str(exc) or "refused, or no answer"
            return None, f"no usable AMQP broker at {redact_url(url)} ({type(exc).__name__}: {detail})"
        try:
            props = getattr(getattr(conn, "_impl", None), "server_properties", None) or {}
            version = " ".join(
                v.decode() if isinstance(v, bytes) else str(v)
                for v in (props.get("product"), props.get("version")) if v) or "unknown"
        finally:
            conn.close()
        return cls(pika, url, version), ""

    def channel_call(self, fn: Callable[[Any], Any]) -> Any:
        """Runs ``fn(channel)`` on a short-lived connection (untimed declares, counts and deletes)."""
        conn = self.pika.BlockingConnection(self.params)
        try:
            return fn(conn.channel())
        finally:
            conn.close()

    def declare(self, queue: str) -> int:
        """Declares a durable queue (passively after the first time); returns its ready count."""
        first = queue not in self.queues
        self.queues.add(queue)
        # x-expires: a queue left behind by a killed run goes by itself after 10 unused minutes.
        return int(self.channel_call(lambda ch: ch.queue_declare(
            queue, passive=not first, durable=True, arguments={"x-expires": 600_000})).method.message_count)

    def delete(self, queue: str) -> None:
        self.channel_call(lambda ch: ch.queue_delete(queue))
        self.queues.discard(queue)

    def delete_leftovers(self) -> None:
        for queue in list(self.queues):
            try:
                self.delete(queue)
            except Exception as exc:  # noqa: BLE001 - clean-up is best effort; x-expires is the backstop
                progress(f"could not delete RabbitMQ queue {queue}: {type(exc).__name__}: {exc}")


def rabbitmq_send(amqp: Amqp, queue: str, n: int, payload: bytes, clients: int) -> tuple[float, int]:
    """``clients`` threads, each with its own connection (pika SelectConnection), publish n messages.

    Persistent messages (delivery_mode 2) to the durable queue through the
    default exchange, on a channel in confirm mode: a thread publishes 100,
    waits until the broker has confirmed all 100 (it confirms persistent
    messages once they are on disk), then publishes the next 100. Each body
    is 1 KiB, its first 10 bytes the message's sequence number.
    Returns seconds and the count confirmed.
    """
    pika = amqp.pika
    take = batch_dispenser(n)
    props = pika.BasicProperties(delivery_mode=pika.DeliveryMode.Persistent)
    tail = payload[10:]

    def work(i: int, ready: Callable[[], Any], stop: threading.Event) -> tuple[float, int]:
        st: dict[str, Any] = {"channel": None, "tag": 0, "outstanding": set(), "confirmed": 0,
                              "finished": None, "error": None}

        def fail(exc: BaseException) -> None:
            if st["error"] is None:
                st["error"] = exc
            if conn.is_open:
                conn.close()
            else:
                conn.ioloop.stop()

        def publish_batch() -> None:
            batch = None if stop.is_set() else take()
            if batch is None:
                st["finished"] = time.perf_counter()
                conn.close()
                return
            start, size = batch
            ch = st["channel"]
            for seq in range(start, start + size):
                ch.basic_publish("", queue, b"%010d" % seq + tail, props)
                st["tag"] += 1
                st["outstanding"].add(st["tag"])

        def on_confirm(frame: Any) -> None:
            m = frame.method
            if isinstance(m, pika.spec.Basic.Nack):
                fail(BenchError(f"rabbitmq_send: the broker nacked delivery tag {m.delivery_tag}"))
                return
            before = len(st["outstanding"])
            if m.multiple:
                st["outstanding"] = {t for t in st["outstanding"] if t > m.delivery_tag}
            else:
                st["outstanding"].discard(m.delivery_tag)
            st["confirmed"] += before - len(st["outstanding"])
            if not st["outstanding"]:
                publish_batch()

        def on_confirm_mode(_frame: Any) -> None:
            try:
                ready()
            except threading.BrokenBarrierError as exc:
                fail(exc)
                return
            publish_batch()

        def on_channel_closed(_ch: Any, reason: Any) -> None:
            if st["finished"] is None:
                fail(BenchError(f"rabbitmq_send: the channel closed: {reason}"))

        def on_channel(ch: Any) -> None:
            st["channel"] = ch
            ch.add_on_close_callback(on_channel_closed)
            ch.confirm_delivery(on_confirm, callback=on_confirm_mode)

        def on_open_error(c: Any, exc: BaseException) -> None:
            st["error"] = st["error"] or exc
            c.ioloop.stop()

        conn = pika.SelectConnection(amqp.params, on_open_callback=lambda c: c.channel(on_open_callback=on_channel),
                                     on_open_error_callback=on_open_error,
                                     on_close_callback=lambda c, reason: c.ioloop.stop())
        conn.ioloop.start()
        if st["error"] is not None:
            raise st["error"]
        check(st["finished"] is not None, "rabbitmq_send: a publisher's connection closed before it finished")
        check(st["confirmed"] == st["tag"], f"rabbitmq_send: {st['confirmed']} of {st['tag']} publishes confirmed")
        return st["finished"], st["confirmed"]

    seconds, confirmed = threaded_phase("rabbitmq_send", clients, work)
    return seconds, sum(confirmed)


def rabbitmq_get_ack(amqp: Amqp, queue: str, n: int, clients: int) -> tuple[float, list[int]]:
    """``clients`` consumers, each with its own connection (pika BlockingConnection), drain n messages.

    basic_qos(prefetch_count=100); each consumer acks with multiple=True every
    100 deliveries, and its last partial batch once the n messages are all
    delivered (or it has had nothing for 10 ms). Returns seconds and the
    sequence numbers read (duplicates kept, for the check).
    """
    lock = threading.Lock()
    consumed = [0]
    progressed = [time.monotonic()]
    stall_s = 15.0

    def work(i: int, ready: Callable[[], Any], stop: threading.Event) -> tuple[float, list[int]]:
        conn = amqp.pika.BlockingConnection(amqp.params)
        try:
            ch = conn.channel()
            ch.basic_qos(prefetch_count=BATCH)
            ready()
            seqs: list[int] = []
            pending = last_tag = 0
            for method, _props, body in ch.consume(queue, inactivity_timeout=0.01):
                if method is not None:
                    check(len(body) == PAYLOAD_BYTES and not method.redelivered,
                          f"rabbitmq_get_ack: a delivery of {len(body)} bytes, redelivered {method.redelivered}")
                    seqs.append(int(body[:10]))
                    pending += 1
                    last_tag = method.delivery_tag
                    with lock:
                        consumed[0] += 1
                        total = consumed[0]
                        progressed[0] = time.monotonic()
                    if pending == BATCH:
                        ch.basic_ack(last_tag, multiple=True)
                        pending = 0
                    if total < n:
                        continue
                else:
                    with lock:
                        total = consumed[0]
                        idle = time.monotonic() - progressed[0]
                    check(total >= n or idle < stall_s,
                          f"rabbitmq_get_ack: {total} of {n} messages delivered, then nothing for {stall_s:.0f} s")
                if pending:
                    ch.basic_ack(last_tag, multiple=True)
                    pending = 0
                if total >= n or stop.is_set():
                    break
            finished = time.perf_counter()
            ch.cancel()
            return finished, seqs
        finally:
            if conn.is_open:
                conn.close()

    seconds, parts = threaded_phase("rabbitmq_get_ack", clients, work)
    return seconds, [s for part in parts for s in part]


# -- the run --------------------------------------------------------------------


def rate(n: int, seconds: float) -> float:
    return n / seconds if seconds > 0 else float("inf")


def quiesce_aof(client: redis.Redis, timeout: float = 60.0) -> int:
    """Rewrites the AOF now and waits for it; returns the count of rewrites so far.

    Run before each timed phase, so an automatic rewrite (a fork and a child
    competing for the CPUs) never lands inside one phase and not another.
    """
    deadline = time.monotonic() + timeout

    def busy() -> bool:
        p = client.info("persistence")
        return bool(int(p.get("aof_rewrite_in_progress", 0)) or int(p.get("aof_rewrite_scheduled", 0)))

    while busy():
        check(time.monotonic() < deadline, "an AOF rewrite did not finish in time")
        time.sleep(0.01)
    client.bgrewriteaof()
    while busy():
        check(time.monotonic() < deadline, "an AOF rewrite did not finish in time")
        time.sleep(0.01)
    p = client.info("persistence")
    check(p.get("aof_last_bgrewrite_status") == "ok", "the AOF rewrite failed")
    return int(p.get("aof_rewrites", 0))


def run(client: redis.Redis, n: int, repeat: int, tenant: str, node: HttpNode | None, amqp: Amqp | None,
        clients: int) -> dict[str, list[float]]:
    """Runs ``repeat`` rounds of the phases; returns msg/s per phase and round.

    Rounds, not one phase after another, and each platform or HTTP phase soon
    after its raw baseline, so a machine whose speed drifts during the run (a
    shared VM does, by tens of percent) affects both sides of a ratio alike.
    """
    phases = [p for p in ORDER if p in CORE_PHASES or (node is not None and p in HTTP_PHASES)
              or (amqp is not None and p in AMQP_PHASES)]
    rates: dict[str, list[float]] = {p: [] for p in phases}
    payload = os.urandom(PAYLOAD_BYTES)
    text = os.urandom(PAYLOAD_BYTES // 2).hex()  # a JSON document's data is text: 1,024 characters
    qs = QueueServer(client)
    batch = [OutgoingMessage(documents=(OutgoingDocument(payload),)) for _ in range(BATCH)]
    group = "g"

    def timed(phase: str, r: int, fn: Callable[[], tuple[Any, ...]], valkey: Any = client) -> tuple[Any, ...]:
        rewrites = quiesce_aof(valkey) if valkey is not None else None
        result = fn()
        seconds = result[0]
        if rewrites is not None and int(valkey.info("persistence").get("aof_rewrites", 0)) != rewrites:
            progress(f"  note: an AOF rewrite started during {phase} {r + 1}")
        rates[phase].append(rate(n, seconds))
        progress(f"  {phase} {r + 1}/{repeat}: {n} messages in {seconds:.3f} s = {rates[phase][-1]:,.0f} msg/s")
        return result

    for r in range(repeat):
        # 1. raw_send, onto a fresh stream
        stream = f"bench:{tenant}:raw:{r}"
        check(not client.exists(stream), f"stream {stream} already exists")
        _, raw_ids = timed("raw_send", r, lambda: raw_send(client, stream, n, payload))
        check(len(raw_ids) == n == len(set(raw_ids)),
              f"raw_send got {len(raw_ids)} ids ({len(set(raw_ids))} distinct) for {n} XADDs")
        check(client.xlen(stream) == n, f"raw_send: the stream holds {client.xlen(stream)} entries, not {n}")

        # 2. platform_send, into a new queue
        queue = f"bench-{r}"
        _, created = qs.put_queue(tenant, queue, "point_to_point")
        check(created, f"queue {queue} already existed")
        _, sent_ids = timed("platform_send", r, lambda: platform_send(qs, tenant, queue, n, batch))
        check(len(sent_ids) == n == len(set(sent_ids)),
              f"platform_send got {len(sent_ids)} ids ({len(set(sent_ids))} distinct) for {n} messages")
        depth = qs.get_queue(tenant, queue).depth
        check(depth == n, f"platform_send: queue depth {depth}, not {n}")

        # 3. http_send, into a new queue of the node
        if node is not None:
            node.put_queue(queue)
            _, http_ids = timed("http_send", r, lambda: http_send(node, queue, n, text, clients), node.valkey)
            check(len(http_ids) == n == len(set(http_ids)),
                  f"http_send got {len(http_ids)} ids ({len(set(http_ids))} distinct) for {n} messages")
            depth = node.queue_info(queue)["depth"]
            check(depth == n, f"http_send: queue depth {depth}, not {n}")

        # 4. raw_get_ack, draining that stream through a new consumer group
        client.xgroup_create(stream, group, id="0")
        _, seen, acked = timed("raw_get_ack", r, lambda: raw_get_ack(client, stream, group))
        check(seen == set(raw_ids), f"raw_get_ack read {len(seen)} distinct ids, not the {n} sent")
        check(acked == n, f"raw_get_ack: XACK acknowledged {acked} of {n}")
        pending = client.xpending(stream, group)["pending"]
        check(pending == 0, f"raw_get_ack left {pending} entries pending")
        client.delete(stream)

        # 5. platform_get_ack, draining that queue
        _, seen, acked = timed("platform_get_ack", r, lambda: platform_get_ack(qs, tenant, queue))
        check(seen == set(sent_ids), f"platform_get_ack got {len(seen)} distinct ids, not the {n} sent")
        check(acked == n, f"platform_get_ack: ack acknowledged {acked} of {n}")
        info = qs.get_queue(tenant, queue)
        check(info.depth == 0 and info.in_flight == 0,
              f"platform_get_ack left depth {info.depth}, in flight {info.in_flight}")
        qs.delete_queue(tenant, queue)

        # 6. http_get_ack, draining the node's queue with several clients at once
        if node is not None:
            _, delivered, acked = timed("http_get_ack", r, lambda: http_get_ack(node, queue, clients), node.valkey)
            check(len(delivered) == n and set(delivered) == set(http_ids),
                  f"http_get_ack got {len(delivered)} deliveries of {len(set(delivered))} distinct ids, "
                  f"not the {n} sent, once each")
            check(acked == n, f"http_get_ack: acks acknowledged {acked} of {n}")
            info_http = node.queue_info(queue)
            check(info_http["depth"] == 0 and info_http["in_flight"] == 0,
                  f"http_get_ack left depth {info_http['depth']}, in flight {info_http['in_flight']}")
            node.delete_queue(queue)

        # 7. rabbitmq_send and 8. rabbitmq_get_ack, through a fresh durable queue
        if amqp is not None:
            rq = f"atomq-bench-{tenant}-{r}"
            check(amqp.declare(rq) == 0, f"RabbitMQ queue {rq} is not empty")
            _, confirmed = timed("rabbitmq_send", r, lambda: rabbitmq_send(amqp, rq, n, payload, clients), None)
            check(confirmed == n, f"rabbitmq_send: {confirmed} of {n} publishes confirmed")
            ready = amqp.declare(rq)
            check(ready == n, f"rabbitmq_send: the queue holds {ready} messages, not {n}")
            _, seqs = timed("rabbitmq_get_ack", r, lambda: rabbitmq_get_ack(amqp, rq, n, clients), None)
            check(len(seqs) == n and set(seqs) == set(range(n)),
                  f"rabbitmq_get_ack got {len(seqs)} deliveries of {len(set(seqs))} distinct messages, "
                  f"not the {n} sent, once each")
            left = amqp.declare(rq)  # the consumers' connections are closed: an unacked message is back
            check(left == 0, f"rabbitmq_get_ack left {left} messages in the queue")
            amqp.delete(rq)
    return rates


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n", 1)[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--messages", type=int, default=20_000, metavar="N",
                        help="messages per phase and repetition (default: %(default)s)")
    parser.add_argument("--repeat", type=int, default=3, metavar="R",
                        help="repetitions of each phase; the median is reported (default: %(default)s)")
    parser.add_argument("--clients", type=int, default=CLIENTS, metavar="C",
                        help="client threads of the HTTP and RabbitMQ phases (default: %(default)s)")
    parser.add_argument("--skip-http", action="store_true", help="leave out the HTTP phases (no atomq serve)")
    parser.add_argument("--http-workers", type=int, metavar="W",
                        help="pass --http-workers W to atomq serve (default: its own default)")
    parser.add_argument("--skip-amqp", action="store_true", help="leave out the RabbitMQ phases")
    parser.add_argument("--amqp-url", default=DEFAULT_AMQP_URL, metavar="URL",
                        help="the RabbitMQ broker of the rabbitmq_* phases; they are skipped when it does not "
                             "answer (default: %(default)s)")
    args = parser.parse_args(argv)
    if args.messages < 1:
        parser.error("--messages must be at least 1")
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    if args.clients < 1:
        parser.error("--clients must be at least 1")
    if args.http_workers is not None and args.http_workers < 1:
        parser.error("--http-workers must be at least 1")
    return args



def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stop_on_sigterm()
    tenant = f"bench-{uuid.uuid4().hex[:12]}"
    data_dir = server = client = node = amqp = None
    skipped: list[str] = []
    try:
        data_dir = tempfile.mkdtemp(prefix="atomq-bench-")
        server = EmbeddedValkey(data_dir)
        progress(f"starting Valkey in a temporary data directory (AOF everysec), tenant {tenant}")
        server.start()
        client = server.client()
        info = client.info("server")
        valkey = str(info.get("valkey_version") or info.get("redis_version"))
        persistence = client.info("persistence")
        check(int(persistence.get("aof_enabled", 0)) == 1, "the embedded server runs without AOF")
        check(client.config_get("appendfsync").get("appendfsync") == "everysec",
              "the embedded server does not use appendfsync everysec")

        if args.skip_http:
            skipped.append("http_send, http_get_ack: skipped (--skip-http)")
        else:
            node = HttpNode(args.http_workers)
            progress(f"starting atomq serve on 127.0.0.1:{node.port} (its own embedded Valkey)")
            node.start()
            progress(f"  atomq serve is up on port {node.port}, workers {node.worker_pids()}")
        if args.skip_amqp:
            skipped.append("rabbitmq_send, rabbitmq_get_ack: skipped (--skip-amqp)")
        else:
            amqp, why = Amqp.probe(args.amqp_url)
            if amqp is None:
                skipped.append(f"rabbitmq_send, rabbitmq_get_ack: skipped: {why}")
            else:
                progress(f"{amqp.version} answers at {redact_url(args.amqp_url)}")
        for line in skipped:
            progress(line)
        progress(f"Valkey {valkey}, Python {platform.python_version()}: "
                 f"{args.messages} messages x {args.repeat} per phase, batches of {BATCH}, {PAYLOAD_BYTES} B, "
                 f"{args.clients} clients for HTTP and RabbitMQ")
        rates = run(client, args.messages, args.repeat, tenant, node, amqp, args.clients)
    except BenchError as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        # Ignore a second Ctrl-C while the servers shut down and the directories go.
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            if amqp is not None:
                amqp.delete_leftovers()
            if node is not None:
                node.stop()
            if client is not None:
                client.close()
            if server is not None:
                server.stop()
        finally:
            if data_dir is not None:
                shutil.rmtree(data_dir, ignore_errors=True)
            signal.signal(signal.SIGINT, previous)

    medians = {p: statistics.median(v) for p, v in rates.items()}
    result: dict[str, object] = {p: round(medians[p]) if p in medians else None
                                 for p in (*CORE_PHASES, *HTTP_PHASES, *AMQP_PHASES)}
    # A ratio is the median of the rounds' ratios: each compares two phases of the same round.
    for name, top, base in RATIOS:
        result[name] = (round(statistics.median(t / b for t, b in zip(rates[top], rates[base])), 3)
                        if top in rates and base in rates else None)
    for p in ORDER:
        if p in rates:
            each = ", ".join(f"{x:,.0f}" for x in rates[p])
            print(f"{p:<17} {medians[p]:>10,.0f} msg/s  (median of {each})")
    for line in skipped:
        print(line)
    for name, top, base in RATIOS:
        if result[name] is not None:
            print(f"{name:<27} {result[name]:.3f}  (median over rounds of {top} / {base})")
    for name, aim in AIMS:
        value = result[name]
        assert value is None or isinstance(value, float)
        verdict = "not measured" if value is None else ("met" if value >= aim else "NOT met")
        print(f"aim {name} >= {aim}: {verdict}" + ("" if value is None else f" ({value:.3f})"))
    result.update(messages=args.messages, batch=BATCH, repeat=args.repeat, clients=args.clients,
                  python=platform.python_version(), valkey=valkey,
                  rabbitmq=None if amqp is None else amqp.version)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
