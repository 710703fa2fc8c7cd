#!/usr/bin/env python3
"""End-to-end latency over HTTP at a steady rate: from a send's request to a consumer's get returning it.

atomq: `atomq serve` (its defaults) on its own embedded Valkey, one queue.
--producers P threads (default 8) together send --rate R messages a second
(default 2,000), each message of 100 bytes due on its own producer's
schedule (an open loop: a producer that falls behind sends what is due at
once, up to 100 messages a request, and the rate reached is reported); with
--linger-ms L a producer waits L ms after a message is due and sends all
that is due by then in one request. Each message carries the time it was
due, so time spent behind schedule counts. --consumers C threads (default 2) long-poll (get up to 100,
waiting up to a second), each get acking the batch before it; a message's
latency is the time from when it was due to the get that returned it.
Each thread speaks HTTP through a requests.Session, or with --client atomq
through atomq's own Python client (AtomqClient: send_texts, take acking the
batch before), as a tenant's Python code does.

RabbitMQ, where --amqp-url answers (pika installed): the same producers
publish persistent messages to a durable queue, one publish a message (no
lingering), each waiting for its confirm (as an HTTP send waits until
stored), and C consumers
(prefetch 100, each message acked) take them; a message's latency is from
when it was due to its delivery.

Each side runs --seconds S (default 10) after one second of warm-up that is
not counted. Only messages sent after the warm-up count, and every one of
them must arrive, once. Output: a line per side on stdout (achieved rate,
p50, p90, p99, max in ms), progress on stderr, and as the LAST stdout line
one JSON object with atomq_p50_ms, atomq_p99_ms, atomq_rate, rabbitmq_p50_ms,
rabbitmq_p99_ms, rabbitmq_rate (null when RabbitMQ did not run), plus
rate, producers, consumers, seconds, linger_ms, client, python, valkey, rabbitmq. Exit status
1 when a check fails, 130 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import threading
import time
from collections.abc import Callable
from typing import Any


from atomq.client import AtomqClient
from drivers.atomq_http import HttpNode
from drivers.cli import add_http_workers, parser_from_doc
from drivers.peers import open_peer
from drivers.rabbitmq import Amqp
from drivers.run_exit import BenchRun
from drivers.serve_node import check, expect, keep_alive_session, progress

WARM_UP_S = 1.0
PAD = "x" * 80


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


class Run:
    """One side's run: producers on a schedule, consumers recording latencies, stopped together."""

    def __init__(self, rate: float, producers: int, consumers: int, seconds: float, linger_s: float = 0.0) -> None:
        self.rate, self.producers, self.consumers, self.seconds = rate, producers, consumers, seconds
        self.linger_s = linger_s
        self.lock = threading.Lock()
        self.latencies: dict[str, float] = {}  # message (producer:seq) -> seconds
        self.sent: list[set[str]] = [set() for _ in range(producers)]
        self.errors: list[BaseException] = []
        self.stop_sending = threading.Event()
        self.stop_consuming = threading.Event()
        self.counted_from = 0.0

    def produce(self, i: int, send: Callable[[list[str]], None]) -> None:
        """Producer ``i``: a message due every producers / rate seconds, from its own offset; a call of
        ``send`` takes every message due by then (at most 100), ``linger_s`` after the first of them.

        A message's time is when it was due, not when its request started: a producer that
        falls behind counts the wait against the latency instead of hiding it."""
        interval = self.producers / self.rate
        start = time.perf_counter() + i * interval / self.producers
        seq = 0
        try:
            while not self.stop_sending.is_set():
                first_due = start + seq * interval
                delay = first_due + self.linger_s - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                count = min(100, int((time.perf_counter() - first_due) / interval) + 1)
                texts = []
                for k in range(seq, seq + count):
                    due, name = start + k * interval, f"{i}:{k}"
                    texts.append(f"{due:.6f} {name} {PAD}")
                    if due >= self.counted_from:
                        self.sent[i].add(name)
                send(texts)
                seq += count
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            self.errors.append(exc)
            self.stop_sending.set()

    def received(self, text: str, at: float) -> None:
        began, name, _ = text.split(" ", 2)
        if float(began) >= self.counted_from:
            with self.lock:
                check(name not in self.latencies, f"message {name} was delivered twice")
                self.latencies[name] = at - float(began)

    def consume(self, loop: Callable[[], None]) -> None:
        try:
            loop()
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            self.errors.append(exc)
            self.stop_sending.set()
            self.stop_consuming.set()

    def go(self, producer: Callable[[int], None], consumer: Callable[[int], None]) -> dict[str, float]:
        """Runs both sides; returns the achieved rate and the percentiles (ms)."""
        self.counted_from = time.perf_counter() + WARM_UP_S
        threads = [threading.Thread(target=consumer, args=(i,), daemon=True) for i in range(self.consumers)]
        threads += [threading.Thread(target=producer, args=(i,), daemon=True) for i in range(self.producers)]
        for t in threads:
            t.start()
        time.sleep(WARM_UP_S + self.seconds)
        self.stop_sending.set()
        for t in threads[self.consumers:]:
            t.join(30)
        expected = set().union(*self.sent)
        deadline = time.monotonic() + 30
        while not self.errors and time.monotonic() < deadline:
            with self.lock:
                if expected <= self.latencies.keys():
                    break
            time.sleep(0.05)
        self.stop_consuming.set()
        for t in threads[:self.consumers]:
            t.join(30)
        if self.errors:
            raise self.errors[0]
        missing = expected - self.latencies.keys()
        check(not missing, f"{len(missing)} of {len(expected)} messages sent never arrived")
        ms = [self.latencies[m] * 1e3 for m in expected]
        check(len(ms) > 0, "no message was sent after the warm-up")
        return {"rate": len(ms) / self.seconds, "p50": percentile(ms, 50), "p90": percentile(ms, 90),
                "p99": percentile(ms, 99), "max": max(ms)}


def atomq_side(node: HttpNode, run: Run, client: str) -> dict[str, float]:
    return (atomq_client_side if client == "atomq" else requests_side)(node, run)


def atomq_client_side(node: HttpNode, run: Run) -> dict[str, float]:
    """Producers and consumers through atomq's own Python client, a client a thread."""

    def producer(i: int) -> None:
        with AtomqClient(node.base, node.tenant_key) as c:
            c.ready()
            run.produce(i, lambda texts: c.send_texts("latency", texts))

    def consumer(i: int) -> None:
        def loop() -> None:
            with AtomqClient(node.base, node.tenant_key) as c:
                previous: list[str] | None = None
                while not run.stop_consuming.is_set():
                    got = c.take("latency", 100, 1000, ack_receipts=previous)["messages"]
                    at = time.perf_counter()
                    for m in got:
                        run.received(m["documents"][0]["data"], at)
                    previous = [m["receipt"] for m in got] or None
        run.consume(loop)

    return run.go(producer, consumer)


def requests_side(node: HttpNode, run: Run, queue: str = "latency") -> dict[str, float]:
    url = f"{node.base}/v1/queues/{queue}"

    def producer(i: int) -> None:
        with keep_alive_session(node.base, node.tenant_key) as s:
            def send(texts: list[str]) -> None:
                expect(s.post(url + "/messages", json={"messages": [{"documents": [{"data": t}]} for t in texts]},
                              timeout=30), 201, "send")
            run.produce(i, send)

    def consumer(i: int) -> None:
        def loop() -> None:
            with keep_alive_session(node.base, node.tenant_key) as s:
                previous: list[str] = []
                while not run.stop_consuming.is_set():
                    body: dict[str, Any] = {"max": 100, "wait_ms": 1000}
                    if previous:
                        body["ack"] = {"receipts": previous}
                    got = expect(s.post(url + "/get", json=body, timeout=30), 200, "get")["messages"]
                    at = time.perf_counter()
                    for m in got:
                        run.received(m["documents"][0]["data"], at)
                    previous = [m["receipt"] for m in got]
        run.consume(loop)

    return run.go(producer, consumer)


def rabbitmq_side(amqp: Amqp, queue: str, run: Run) -> dict[str, float]:
    pika = amqp.pika
    props = pika.BasicProperties(delivery_mode=pika.DeliveryMode.Persistent)

    def producer(i: int) -> None:
        conn = pika.BlockingConnection(amqp.params)
        try:
            ch = conn.channel()
            ch.confirm_delivery()  # each basic_publish returns once the broker confirmed it
            def send(texts: list[str]) -> None:
                for text in texts:
                    ch.basic_publish("", queue, text.encode(), props)

            run.produce(i, send)
        finally:
            conn.close()

    def consumer(i: int) -> None:
        def loop() -> None:
            conn = pika.BlockingConnection(amqp.params)
            try:
                ch = conn.channel()
                ch.basic_qos(prefetch_count=100)
                for method, _props, body in ch.consume(queue, inactivity_timeout=0.05):
                    if method is not None:
                        run.received(body.decode(), time.perf_counter())
                        ch.basic_ack(method.delivery_tag)
                    if run.stop_consuming.is_set():
                        break
                ch.cancel()
            finally:
                conn.close()
        run.consume(loop)

    return run.go(producer, consumer)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = parser_from_doc(__doc__ or "")
    parser.add_argument("--rate", type=float, default=2000.0, metavar="R", help="messages a second (default: 2000)")
    parser.add_argument("--producers", type=int, default=8, metavar="P", help="producer threads (default: 8)")
    parser.add_argument("--consumers", type=int, default=2, metavar="C", help="consumer threads (default: 2)")
    parser.add_argument("--seconds", type=float, default=10.0, metavar="S", help="measured seconds a side (default: 10)")
    parser.add_argument("--linger-ms", type=float, default=0.0, metavar="L",
                        help="an atomq producer waits L ms after a message is due and sends everything due by "
                             "then in one request (default: 0, one message a request when it keeps up)")
    parser.add_argument("--client", choices=("requests", "atomq"), default="requests",
                        help="what atomq's producers and consumers speak HTTP with: a requests.Session each "
                             "(default), or atomq's own Python client (atomq.client.AtomqClient), as a "
                             "tenant's Python code does")
    parser.add_argument("--skip-amqp", action="store_true", help="leave out RabbitMQ")
    parser.add_argument("--amqp-url", default="amqp://guest:guest@127.0.0.1:5672/", metavar="URL",
                        help="the RabbitMQ broker compared with (default: %(default)s)")
    add_http_workers(parser, None)
    args = parser.parse_args(argv)
    if args.rate <= 0 or args.producers < 1 or args.consumers < 1 or args.seconds <= 0:
        parser.error("--rate and --seconds must be above 0, --producers and --consumers at least 1")
    return args


def line(side: str, r: dict[str, float]) -> str:
    return (f"{side:<9} {r['rate']:>7,.0f} msg/s  p50 {r['p50']:.2f} ms  p90 {r['p90']:.2f} ms  "
            f"p99 {r['p99']:.2f} ms  max {r['max']:.2f} ms")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    results: dict[str, dict[str, float]] = {}
    versions: dict[str, str | None] = {"valkey": None, "rabbitmq": None}
    with BenchRun() as bench:
        node = HttpNode(args.http_workers)
        bench.at_exit(node.stop)
        progress("starting atomq serve (its own embedded Valkey)")
        node.start()
        assert node.valkey is not None
        versions["valkey"] = str(node.valkey.info("server").get("valkey_version"))
        node.put_queue("latency")
        progress(f"atomq: {args.rate:g} msg/s from {args.producers} producers, {args.consumers} consumers, "
                 f"{args.seconds:g} s")
        results["atomq"] = atomq_side(node, Run(args.rate, args.producers, args.consumers, args.seconds,
                                                args.linger_ms / 1000), args.client)
        amqp, why = open_peer(bench, "RabbitMQ", "--skip-amqp" if args.skip_amqp else None, Amqp.probe, args.amqp_url)
        if amqp is None:
            progress(str(why))
        else:
            versions["rabbitmq"] = amqp.version
            queue = f"atomq-latency-{node.port}"
            check(amqp.declare(queue) == 0, f"RabbitMQ queue {queue} is not empty")
            progress(f"{amqp.version}: the same load")
            results["rabbitmq"] = rabbitmq_side(amqp, queue, Run(args.rate, args.producers, args.consumers,
                                                                   args.seconds))
            amqp.delete(queue)
    if bench.status is not None:
        return bench.status
    for side, r in results.items():
        print(line(side, r))
    out: dict[str, object] = {}
    for side in ("atomq", "rabbitmq"):
        r = results.get(side)
        out[f"{side}_p50_ms"] = None if r is None else round(r["p50"], 3)
        out[f"{side}_p99_ms"] = None if r is None else round(r["p99"], 3)
        out[f"{side}_rate"] = None if r is None else round(r["rate"])
    out.update(rate=args.rate, producers=args.producers, consumers=args.consumers, seconds=args.seconds,
               linger_ms=args.linger_ms, client=args.client,
               python=platform.python_version(), **versions)
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
