#!/usr/bin/env python3
"""Throughput of the queue core, the HTTP API and RabbitMQ against raw Redis streams.

Phases over --messages messages of one 1 KiB document (payload) each, in
batches of 100:

  raw_send          redis-py pipelined XADD, 100 per round trip (transaction=False)
  platform_send     QueueServer.send of 100 messages per call
  http_send         POST /v1/queues/Q/messages of 100 messages, 4 client threads
  raw_get_ack       XREADGROUP COUNT 100 + XACK of the previous batch in one pipeline
  platform_get_ack  QueueServer.get(max_messages=100) + ack(ids=...) until drained
  platform_consume  QueueServer.take(max_messages=100, ack_ids=<previous batch>)
                    on the queue filled again (untimed), until drained
  http_get_ack      POST .../get {"max": 100} + POST .../ack {"ids": [...]},
                    4 client threads on the same queue, until drained
  http_consume      POST .../get {"max": 100, "ack": {"receipts": [previous batch]}},
                    4 client threads on a queue filled again (untimed), until
                    drained: one request a batch
  client_send       the same as http_send through atomq's Python client
                    (AtomqClient.send), 4 threads each with its own client, into
                    the queue http_consume drained: what a tenant's Python
                    producer gets, as the RabbitMQ phases use pika
  client_consume    the same through atomq's Python client (AtomqClient.take
                    with ack_receipts), 4 threads each with its own client, on
                    the queue filled again (untimed): what a tenant's Python
                    consumer gets, as the RabbitMQ phases use pika
  rabbitmq_send     pika, 4 threads each with its own connection: persistent
                    messages to a durable queue, publisher confirms awaited per 100
  rabbitmq_get_ack  pika, 4 consumers each with its own connection: prefetch 100,
                    basic_ack(multiple=True) every 100, until drained
  jetstream_send    nats-py, 4 threads each with its own connection: 100
                    publishes at once to a stream kept on disk, all 100 acks
                    awaited, then the next 100
  jetstream_get_ack nats-py, 4 threads on one durable pull consumer: fetch 100,
                    ack each (explicit acks), until drained

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
install 'atomq[bench]'), the NATS phases where --nats-url answers with
JetStream on (and nats-py is installed); otherwise a line says they were
skipped and their figures are null. Everything started or made is stopped or removed at the
end, also on an error or Ctrl-C.

Output: a line per phase (median msg/s and each round), per ratio and per
aim on stdout, progress on stderr, and as the LAST stdout line one JSON
object with raw_send, platform_send, raw_get_ack, platform_get_ack,
platform_consume, http_send,
http_get_ack, http_consume, client_send, client_consume, rabbitmq_send, rabbitmq_get_ack, jetstream_send,
jetstream_get_ack (medians, msg/s; null when a phase did not run),
platform_send_ratio, platform_get_ack_ratio, http_send_ratio,
http_get_ack_ratio, http_send_vs_rabbitmq_send, http_consume_ratio,
http_consume_vs_rabbitmq_get_ack, http_send_vs_jetstream_send,
http_consume_vs_jetstream_get_ack, platform_consume_ratio,
client_consume_vs_rabbitmq_get_ack, client_send_vs_rabbitmq_send, plus
messages, batch, repeat, clients, python, valkey, rabbitmq, nats. Exit status 1
when a correctness check fails (each get+ack phase must consume exactly the
N messages sent, each once), 130 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
import uuid
from typing import Any, Callable

import redis

from atomq.platform import OutgoingDocument, OutgoingMessage, QueueServer
from drivers.atomq_http import HttpNode, http_consume, http_get_ack, http_send
from drivers.cli import add_http_workers, add_rounds, check_rounds, parser_from_doc
from drivers.embedded import quiesce_aof, start_valkey
from drivers.queue_server import platform_consume, platform_get_ack, platform_send
from drivers.nats_jetstream import Jetstream, jetstream_get_ack, jetstream_send
from drivers.peers import open_peer
from drivers.rabbitmq import Amqp, rabbitmq_get_ack, rabbitmq_send
from drivers.redis_streams import raw_get_ack, raw_send
from drivers.run_exit import BenchRun
from drivers.serve_node import check, progress
from drivers.workload import BATCH, PAYLOAD_BYTES

CLIENTS = 4
CORE_PHASES = ("raw_send", "platform_send", "raw_get_ack", "platform_get_ack", "platform_consume")
HTTP_PHASES = ("http_send", "http_get_ack", "http_consume", "client_send", "client_consume")
AMQP_PHASES = ("rabbitmq_send", "rabbitmq_get_ack")
NATS_PHASES = ("jetstream_send", "jetstream_get_ack")
ORDER = ("raw_send", "platform_send", "http_send", "raw_get_ack", "platform_get_ack", "platform_consume", "http_get_ack",
         "http_consume", "client_send", "client_consume", "rabbitmq_send", "rabbitmq_get_ack", "jetstream_send",
         "jetstream_get_ack")
RATIOS = (("platform_send_ratio", "platform_send", "raw_send"),
          ("platform_get_ack_ratio", "platform_get_ack", "raw_get_ack"),
          ("http_send_ratio", "http_send", "raw_send"),
          ("http_get_ack_ratio", "http_get_ack", "raw_get_ack"),
          ("http_send_vs_rabbitmq_send", "http_send", "rabbitmq_send"),
          ("http_consume_ratio", "http_consume", "raw_get_ack"),
          ("platform_consume_ratio", "platform_consume", "raw_get_ack"),
          ("http_consume_vs_rabbitmq_get_ack", "http_consume", "rabbitmq_get_ack"),
          ("http_send_vs_jetstream_send", "http_send", "jetstream_send"),
          ("http_consume_vs_jetstream_get_ack", "http_consume", "jetstream_get_ack"),
          ("client_consume_vs_rabbitmq_get_ack", "client_consume", "rabbitmq_get_ack"),
          ("client_send_vs_rabbitmq_send", "client_send", "rabbitmq_send"))
AIMS = (("http_send_ratio", 0.3), ("http_send_vs_rabbitmq_send", 2.5), ("http_consume_vs_rabbitmq_get_ack", 1.5))
DEFAULT_AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/"
DEFAULT_NATS_URL = "nats://127.0.0.1:4222"


def rate(n: int, seconds: float) -> float:
    return n / seconds if seconds > 0 else float("inf")


def check_drained(phase: str, node: HttpNode, queue: str, sent: list[str], delivered: list[str], acked: int) -> None:
    """An HTTP phase consumed exactly the ids sent, each once, acked them all and left nothing behind."""
    n = len(sent)
    check(len(delivered) == n and set(delivered) == set(sent),
          f"{phase} got {len(delivered)} deliveries of {len(set(delivered))} distinct ids, not the {n} sent, once each")
    check(acked == n, f"{phase}: {acked} of {n} acked")
    info = node.queue_info(queue)
    check(info["depth"] == 0 and info["in_flight"] == 0,
          f"{phase} left depth {info['depth']}, in flight {info['in_flight']}")


def check_queue_drained(phase: str, qs: QueueServer, tenant: str, queue: str, sent: list[str], seen: set[str],
                        acked: int) -> None:
    """A library phase consumed exactly the ids sent, acked them all and left nothing behind."""
    n = len(sent)
    check(seen == set(sent), f"{phase} got {len(seen)} distinct ids, not the {n} sent")
    check(acked == n, f"{phase}: {acked} of {n} acked")
    info = qs.get_queue(tenant, queue)
    check(info.depth == 0 and info.in_flight == 0, f"{phase} left depth {info.depth}, in flight {info.in_flight}")


def run(client: redis.Redis, n: int, repeat: int, tenant: str, node: HttpNode | None, amqp: Amqp | None,
        js: Jetstream | None, clients: int) -> dict[str, list[float]]:
    """Runs ``repeat`` rounds of the phases; returns msg/s per phase and round.

    Rounds, not one phase after another, and each platform or HTTP phase soon
    after its raw baseline, so a machine whose speed drifts during the run (a
    shared VM does, by tens of percent) affects both sides of a ratio alike.
    """
    phases = [p for p in ORDER if p in CORE_PHASES or (node is not None and p in HTTP_PHASES)
              or (amqp is not None and p in AMQP_PHASES) or (js is not None and p in NATS_PHASES)]
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
        check_queue_drained("platform_get_ack", qs, tenant, queue, sent_ids, seen, acked)

        # 5b. platform_consume: the queue filled again (untimed), drained by takes that ack the batch before
        _, sent_ids = platform_send(qs, tenant, queue, n, batch)
        _, seen, acked = timed("platform_consume", r, lambda: platform_consume(qs, tenant, queue))
        check_queue_drained("platform_consume", qs, tenant, queue, sent_ids, seen, acked)
        qs.delete_queue(tenant, queue)

        # 6. http_get_ack, draining the node's queue with several clients at once
        if node is not None:
            _, delivered, acked = timed("http_get_ack", r, lambda: http_get_ack(node, queue, clients), node.valkey)
            check_drained("http_get_ack", node, queue, http_ids, delivered, acked)

            # 7. http_consume: the queue filled again (untimed), drained by gets that ack the batch before
            _, http_ids = http_send(node, queue, n, text, clients)
            _, delivered, acked = timed("http_consume", r, lambda: http_consume(node, queue, clients), node.valkey)
            check_drained("http_consume", node, queue, http_ids, delivered, acked)

            # 7b. client_send fills it again, client_consume drains it: through atomq's Python client
            _, http_ids = timed("client_send", r, lambda: http_send(node, queue, n, text, clients, "client_send"),
                                node.valkey)
            check(len(http_ids) == n == len(set(http_ids)),
                  f"client_send got {len(http_ids)} ids ({len(set(http_ids))} distinct) for {n} messages")
            _, delivered, acked = timed("client_consume", r,
                                        lambda: http_consume(node, queue, clients, "client_consume"), node.valkey)
            check_drained("client_consume", node, queue, http_ids, delivered, acked)
            node.delete_queue(queue)

        # 8. rabbitmq_send and 9. rabbitmq_get_ack, through a fresh durable queue
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

        # 10. jetstream_send and 11. jetstream_get_ack, through a fresh stream kept on disk
        if js is not None:
            stream = f"atomq-bench-{tenant}-{r}"
            js.create(stream)
            _, stored = timed("jetstream_send", r, lambda: jetstream_send(js, stream, n, payload, clients), None)
            check(stored == n and js.counts(stream)[0] == n, f"jetstream_send: {stored} of {n} publishes acked")
            _, seqs = timed("jetstream_get_ack", r, lambda: jetstream_get_ack(js, stream, n, clients), None)
            check(sorted(seqs) == list(range(n)), f"jetstream_get_ack got {len(seqs)} deliveries of "
                                                  f"{len(set(seqs))} distinct messages, not the {n} sent, once each")
            # The server takes acks in asynchronously: the last ones may still be on their way in.
            deadline = time.monotonic() + 5
            while (left := js.counts(stream))[1:] != (0, 0) and time.monotonic() < deadline:
                time.sleep(0.05)
            check(left[1:] == (0, 0), f"jetstream_get_ack left {left[1]} undelivered, {left[2]} unacked")
            js.delete(stream)
    return rates


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = parser_from_doc(__doc__)
    add_rounds(parser)
    parser.add_argument("--clients", type=int, default=CLIENTS, metavar="C",
                        help="client threads of the HTTP and RabbitMQ phases (default: %(default)s)")
    parser.add_argument("--skip-http", action="store_true", help="leave out the HTTP phases (no atomq serve)")
    add_http_workers(parser, default=None)
    parser.add_argument("--skip-amqp", action="store_true", help="leave out the RabbitMQ phases")
    parser.add_argument("--amqp-url", default=DEFAULT_AMQP_URL, metavar="URL",
                        help="the RabbitMQ broker of the rabbitmq_* phases; they are skipped when it does not "
                             "answer (default: %(default)s)")
    parser.add_argument("--skip-nats", action="store_true", help="leave out the NATS JetStream phases")
    parser.add_argument("--nats-url", default=DEFAULT_NATS_URL, metavar="URL",
                        help="the NATS server (with JetStream) of the jetstream_* phases; they are skipped when it "
                             "does not answer (default: %(default)s)")
    args = parser.parse_args(argv)
    check_rounds(parser, args)
    if args.clients < 1:
        parser.error("--clients must be at least 1")
    if args.http_workers is not None and args.http_workers < 1:
        parser.error("--http-workers must be at least 1")
    return args



def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    tenant = f"bench-{uuid.uuid4().hex[:12]}"
    node = amqp = None
    skipped: list[str] = []
    with BenchRun() as bench:
        client, valkey = start_valkey(bench, tenant)

        if args.skip_http:
            skipped.append("http_send, http_get_ack, http_consume: skipped (--skip-http)")
        else:
            node = HttpNode(args.http_workers)
            bench.at_exit(node.stop)
            progress(f"starting atomq serve on 127.0.0.1:{node.port} (its own embedded Valkey)")
            node.start()
            progress(f"  atomq serve is up on port {node.port}, workers {node.worker_pids()}")
        amqp, why = open_peer(bench, "rabbitmq_send, rabbitmq_get_ack", "--skip-amqp" if args.skip_amqp else None,
                              Amqp.probe, args.amqp_url)
        js, why_not_nats = open_peer(bench, "jetstream_send, jetstream_get_ack",
                                     "--skip-nats" if args.skip_nats else None, Jetstream.probe, args.nats_url)
        skipped += [line for line in (why, why_not_nats) if line]
        for line in skipped:
            progress(line)
        progress(f"Valkey {valkey}, Python {platform.python_version()}: "
                 f"{args.messages} messages x {args.repeat} per phase, batches of {BATCH}, {PAYLOAD_BYTES} B, "
                 f"{args.clients} clients for HTTP, RabbitMQ and NATS")
        rates = run(client, args.messages, args.repeat, tenant, node, amqp, js, args.clients)
    if bench.status is not None:
        return bench.status
    medians = {p: statistics.median(v) for p, v in rates.items()}
    result: dict[str, object] = {p: round(medians[p]) if p in medians else None
                                 for p in (*CORE_PHASES, *HTTP_PHASES, *AMQP_PHASES, *NATS_PHASES)}
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
                  rabbitmq=None if amqp is None else amqp.version, nats=None if js is None else js.version)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
