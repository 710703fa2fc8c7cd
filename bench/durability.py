#!/usr/bin/env python3
"""What a send costs when it is answered only once it is on disk: a sync queue against RabbitMQ's durable publisher confirms.

Each sender sends one message of one 1 KiB document at a time and waits for
its answer before the next, for --seconds seconds; 1, 4 and 16 senders run at
once (threads, each with its own connection). Phases, each at every sender
count, through QueueServer on an embedded Valkey (AOF on):

  async_everysec     a queue of durability async: answered once Valkey holds the message
                     (its AOF synced every second): the scale
  sync_everysec      a queue of durability sync: answered after WAITAOF, which under
                     appendfsync everysec waits for the next sync, up to a second
  sync_always        the same queue on a Valkey with appendfsync always, which syncs before it
                     answers (the fair peer of RabbitMQ, which confirms once it has synced)
  async_always       an async queue on that Valkey: what appendfsync always costs every queue
  rabbitmq_confirm   RabbitMQ: a persistent message to a durable queue on a channel in confirm
                     mode, waiting for the confirm (it confirms persistent messages once on disk)

RabbitMQ phases run where --amqp-url answers (and pika is installed: pip
install 'atomq[bench]'); else they are skipped with the reason. Each send's
latency is timed from the call to its answer. Every message sent is checked
to be stored (the queue's depth) after each phase.

Output: a line per phase and sender count on stdout (messages/s, p50 and p99
latency in ms), progress on stderr, and as the LAST stdout line one JSON
object: for each phase and sender count "<phase>_<n>": {"msg_s", "p50_ms",
"p99_ms", "sends"}, then sync_always_vs_rabbitmq_<n> (msg/s ratio, where
RabbitMQ ran), seconds, python, valkey, rabbitmq. Exit status 1 when a check
fails.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import redis
from drivers.cli import parser_from_doc
from drivers.peers import open_peer
from drivers.rabbitmq import Amqp
from drivers.run_exit import BenchRun
from drivers.serve_node import check, progress
from drivers.workload import PAYLOAD_BYTES, threaded_phase

from atomq.platform import OutgoingDocument, OutgoingMessage, QueueServer
from atomq.platform.store.embedded import EmbeddedValkey

SENDERS = (1, 4, 16)
DEFAULT_AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/"


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def timed_senders(what: str, senders: int, seconds: float,
                  connect: Callable[[int], Callable[[int], None]]) -> tuple[float, list[float]]:
    """``senders`` threads each call ``connect(i)`` (set up, untimed) and then the send it returns,
    one message at a time, until ``seconds`` have passed. Returns the phase's seconds and every
    send's latency in seconds."""
    def work(i: int, ready: Callable[[], Any], stop: threading.Event) -> tuple[float, list[float]]:
        send = connect(i)
        ready()
        latencies: list[float] = []
        deadline = time.perf_counter() + seconds
        seq = 0
        while not stop.is_set():
            t0 = time.perf_counter()
            if t0 >= deadline:
                break
            send(seq)
            latencies.append(time.perf_counter() - t0)
            seq += 1
        return time.perf_counter(), latencies

    elapsed, per_thread = threaded_phase(what, senders, work)
    return elapsed, [x for part in per_thread for x in part]


def atomq_phase(client: redis.Redis, tenant: str, queue: str, durability: str, senders: int,
                seconds: float) -> tuple[float, list[float]]:
    qs = QueueServer(client)
    qs.put_queue(tenant, queue, "point_to_point", durability=durability)
    payload = os.urandom(PAYLOAD_BYTES)

    def connect(i: int) -> Callable[[int], None]:
        def send(seq: int) -> None:
            qs.send(tenant, queue, [OutgoingMessage(documents=(OutgoingDocument(payload),))])
        return send

    elapsed, latencies = timed_senders(f"{queue}", senders, seconds, connect)
    depth = qs.get_queue(tenant, queue).depth
    check(depth == len(latencies), f"{queue}: {len(latencies)} sends answered, {depth} stored")
    qs.delete_queue(tenant, queue)
    return elapsed, latencies


def rabbitmq_phase(amqp: Amqp, queue: str, senders: int, seconds: float) -> tuple[float, list[float]]:
    pika = amqp.pika
    check(amqp.declare(queue) == 0, f"RabbitMQ queue {queue} is not empty")
    props = pika.BasicProperties(delivery_mode=pika.DeliveryMode.Persistent)
    payload = os.urandom(PAYLOAD_BYTES)
    connections: list[Any] = []
    lock = threading.Lock()

    def connect(i: int) -> Callable[[int], None]:
        conn = pika.BlockingConnection(amqp.params)
        with lock:
            connections.append(conn)
        channel = conn.channel()
        channel.confirm_delivery()

        def send(seq: int) -> None:
            # In confirm mode a BlockingChannel's publish returns once the broker confirmed it
            # (and raises on a nack): the persistent message is on disk.
            channel.basic_publish("", queue, payload, props, mandatory=True)
        return send

    try:
        elapsed, latencies = timed_senders(queue, senders, seconds, connect)
    finally:
        for conn in connections:
            if conn.is_open:
                conn.close()
    stored = amqp.declare(queue)
    check(stored == len(latencies), f"{queue}: {len(latencies)} publishes confirmed, {stored} in the queue")
    amqp.delete(queue)
    return elapsed, latencies


def start_valkey(bench: BenchRun, appendfsync: str) -> tuple[redis.Redis, str]:
    """An embedded Valkey with AOF and ``appendfsync``, in a temporary directory the run removes."""
    data_dir = tempfile.mkdtemp(prefix="atomq-bench-")
    bench.at_exit(shutil.rmtree, data_dir, ignore_errors=True)
    server = EmbeddedValkey(data_dir)
    bench.at_exit(server.stop)
    server.start()
    client = server.client()
    bench.at_exit(client.close)
    client.config_set("appendfsync", appendfsync)
    check(int(client.info("persistence").get("aof_enabled", 0)) == 1, "the embedded server runs without AOF")
    info = client.info("server")
    return client, str(info.get("valkey_version") or info.get("redis_version"))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = parser_from_doc(__doc__)
    parser.add_argument("--seconds", type=float, default=5.0, metavar="S",
                        help="how long each phase sends, at each sender count (default: %(default)s)")
    parser.add_argument("--amqp-url", default=DEFAULT_AMQP_URL, metavar="URL",
                        help="the RabbitMQ broker to compare with (default: %(default)s)")
    parser.add_argument("--skip-amqp", action="store_true", help="leave the RabbitMQ phases out")
    args = parser.parse_args(argv)
    if args.seconds <= 0:
        parser.error("--seconds must be above 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    tenant = f"bench-{uuid.uuid4().hex[:12]}"
    results: dict[str, dict[str, float]] = {}
    amqp: Amqp | None = None
    versions: dict[str, str] = {}
    with BenchRun() as bench:
        amqp, why = open_peer(bench, "RabbitMQ phases", "--skip-amqp" if args.skip_amqp else None, Amqp.probe,
                              args.amqp_url)
        if amqp is None:
            progress(str(why))
        else:
            versions["rabbitmq"] = amqp.version
        everysec, versions["valkey"] = start_valkey(bench, "everysec")
        always, _ = start_valkey(bench, "always")
        phases: list[tuple[str, Callable[[int, str], tuple[float, list[float]]]]] = [
            ("async_everysec", lambda n, q: atomq_phase(everysec, tenant, q, "async", n, args.seconds)),
            ("sync_everysec", lambda n, q: atomq_phase(everysec, tenant, q, "sync", n, args.seconds)),
            ("sync_always", lambda n, q: atomq_phase(always, tenant, q, "sync", n, args.seconds)),
            ("async_always", lambda n, q: atomq_phase(always, tenant, q, "async", n, args.seconds)),
        ]
        if amqp is not None:
            phases.append(("rabbitmq_confirm", lambda n, q: rabbitmq_phase(amqp, q, n, args.seconds)))
        progress(f"Valkey {versions['valkey']}, Python {platform.python_version()}: each phase {args.seconds:g} s "
                 f"at {', '.join(map(str, SENDERS))} senders, one {PAYLOAD_BYTES} B message a send")
        for senders in SENDERS:
            for phase, run in phases:
                elapsed, latencies = run(senders, f"bench-{tenant}-{phase}-{senders}")
                check(bool(latencies), f"{phase} at {senders} senders answered no send")
                key = f"{phase}_{senders}"
                results[key] = {"msg_s": round(len(latencies) / elapsed, 1),
                                "p50_ms": round(statistics.median(latencies) * 1000, 2),
                                "p99_ms": round(percentile(latencies, 0.99) * 1000, 2),
                                "sends": len(latencies)}
                r = results[key]
                progress(f"  {key}: {r['sends']} sends, {r['msg_s']:,.1f} msg/s, p50 {r['p50_ms']} ms, "
                         f"p99 {r['p99_ms']} ms")
    if bench.status is not None:
        return bench.status
    for key, r in results.items():
        print(f"{key:<22} {r['msg_s']:>10,.1f} msg/s  p50 {r['p50_ms']:>8.2f} ms  p99 {r['p99_ms']:>8.2f} ms  "
              f"({r['sends']} sends)")
    out: dict[str, Any] = dict(results)
    for senders in SENDERS:
        peer = results.get(f"rabbitmq_confirm_{senders}")
        if peer:
            ratio = round(results[f"sync_always_{senders}"]["msg_s"] / peer["msg_s"], 3)
            out[f"sync_always_vs_rabbitmq_{senders}"] = ratio
            print(f"sync_always_vs_rabbitmq_{senders:<3} {ratio:.3f}  (msg/s)")
    out.update(seconds=args.seconds, python=platform.python_version(), **versions)
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
