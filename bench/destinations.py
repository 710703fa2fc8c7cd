#!/usr/bin/env python3
"""What topics, priorities and expiry cost the queue core, against a plain queue and raw Redis streams.

Phases over --messages messages of one 1 KiB document (payload) each, in
batches of 100, through QueueServer on one embedded Valkey:

  raw_send            redis-py pipelined XADD, 100 per round trip (the baseline of every ratio)
  plain_send          send to a plain queue (every message of the default priority)
  publish_1           publish to a topic while the tenant's queues attract 1 pattern in all
  publish_10          ... 10 patterns (10 queues, one of which matches the topic)
  publish_100         ... 100 patterns (100 queues, one of which matches)
  limited_send        send to a queue with max_messages and max_bytes set far above what it holds:
                      what checking the limits costs each send
  overflow_send       send to a queue of max_messages 1,000 with overflow drop_oldest, full after
                      its first 1,000: each batch drops as many waiting messages as it stores
  priority_send       send to a plain queue, priorities 0 to 9 in turn
  ttl_send            send with ttl_s 3600 to a plain queue
  plain_get_ack       get(max 100) + ack(ids) until drained, of the plain queue
  priority_get_ack    the same, of the queue of mixed priorities
  ttl_get_ack         the same, of the queue whose messages expire

Every publish stores its batch in exactly one queue (checked), so a publish
phase differs from plain_send only by the matching of the topic and the
multi-queue send script. Before the rounds, one get of a batch of mixed
priorities is checked to come highest first. The phases run as one round, in
that order, --repeat rounds in a row; the median of the rounds is reported
for each phase, and each ratio is the median of the rounds' ratios: a send
or publish to the round's raw_send (and, as *_vs_plain_send, to its
plain_send), a get+ack to the round's plain_get_ack.
Each round uses fresh queues.
Before each timed phase the AOF is rewritten and waited for (as in
throughput.py). Only the loops are timed.

Output: a line per phase and per ratio on stdout, progress on stderr, and as
the LAST stdout line one JSON object with the phases' medians (msg/s), the
ratios publish_1_ratio, publish_10_ratio, publish_100_ratio,
limited_send_ratio, overflow_send_ratio, priority_send_ratio, ttl_send_ratio,
plain_send_ratio (each / raw_send), publish_1_vs_plain_send,
publish_10_vs_plain_send, publish_100_vs_plain_send, limited_send_vs_plain_send,
overflow_send_vs_plain_send, priority_send_vs_plain_send,
ttl_send_vs_plain_send (each / plain_send),
priority_get_ack_ratio, ttl_get_ack_ratio (each / plain_get_ack), and
messages, batch, repeat, python, valkey. Exit status 1 when a check fails.
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
from collections.abc import Callable
from typing import Any

import redis

from atomq.platform import OutgoingDocument, OutgoingMessage, QueueServer
from drivers.cli import add_rounds, check_rounds, parser_from_doc
from drivers.embedded import quiesce_aof, start_valkey
from drivers.queue_server import platform_get_ack, platform_send
from drivers.redis_streams import raw_send
from drivers.run_exit import BenchRun
from drivers.serve_node import check, progress
from drivers.workload import BATCH, PAYLOAD_BYTES
from throughput import rate

PATTERN_COUNTS = (1, 10, 100)
TOPIC = "orders/eu/new"
SEND_PHASES = ("raw_send", "plain_send", *(f"publish_{n}" for n in PATTERN_COUNTS), "limited_send", "overflow_send",
               "priority_send", "ttl_send")
GET_PHASES = ("plain_get_ack", "priority_get_ack", "ttl_get_ack")
SEND_RATIOS = ("plain_send", *(f"publish_{n}" for n in PATTERN_COUNTS), "limited_send", "overflow_send",
               "priority_send", "ttl_send")
OVERFLOW_LIMIT = 1000


def publish(qs: QueueServer, tenant: str, n: int, batch: list[OutgoingMessage],
            expected: str) -> tuple[float, list[str]]:
    ids: list[str] = []
    t0 = time.perf_counter()
    sent = 0
    while sent < n:
        size = min(BATCH, n - sent)
        published = qs.publish(tenant, TOPIC, batch if size == BATCH else batch[:size])
        check(published.queues == [expected], f"a publish reached {published.queues}, not [{expected!r}]")
        ids.extend(published.ids)
        sent += size
    return time.perf_counter() - t0, ids


def attract(qs: QueueServer, tenant: str, r: int, patterns: int) -> str:
    """``patterns`` queues of one pattern each, only the first matching TOPIC; returns its name."""
    for i in range(patterns):
        topic = "orders/eu/>" if i == 0 else f"other{i}/*/new"
        qs.put_queue(tenant, f"t{patterns}-{r}-{i}", "point_to_point", topics=[topic])
    return f"t{patterns}-{r}-0"


def run(client: redis.Redis, n: int, repeat: int, tenant: str) -> dict[str, list[float]]:
    rates: dict[str, list[float]] = {p: [] for p in (*SEND_PHASES, *GET_PHASES)}
    payload = os.urandom(PAYLOAD_BYTES)
    qs = QueueServer(client)
    plain = [OutgoingMessage(documents=(OutgoingDocument(payload),)) for _ in range(BATCH)]
    ranked = [OutgoingMessage(documents=(OutgoingDocument(payload),), priority=i % 10) for i in range(BATCH)]
    expiring = [OutgoingMessage(documents=(OutgoingDocument(payload),), ttl_s=3600) for _ in range(BATCH)]

    def timed(phase: str, r: int, fn: Callable[[], tuple[Any, ...]]) -> tuple[Any, ...]:
        quiesce_aof(client)
        result = fn()
        rates[phase].append(rate(n, result[0]))
        progress(f"  {phase} {r + 1}/{repeat}: {n} messages in {result[0]:.3f} s = {rates[phase][-1]:,.0f} msg/s")
        return result

    def sent_into(phase: str, r: int, queue: str, fn: Callable[[], tuple[Any, ...]], depth: int = n) -> set[str]:
        _, ids = timed(phase, r, fn)
        check(len(ids) == n == len(set(ids)), f"{phase} got {len(ids)} ids ({len(set(ids))} distinct) for {n}")
        held = qs.get_queue(tenant, queue).depth
        check(held == depth, f"{phase}: queue depth {held}, not {depth}")
        return set(ids)

    for r in range(repeat):
        stream = f"bench:{tenant}:raw:{r}"
        _, raw_ids = timed("raw_send", r, lambda: raw_send(client, stream, n, payload))
        check(len(raw_ids) == n, f"raw_send got {len(raw_ids)} ids for {n} XADDs")
        client.delete(stream)
        queues = {name: f"{name}-{r}" for name in ("plain", "priority", "ttl")}
        for q in queues.values():
            qs.put_queue(tenant, q, "point_to_point")
        sent = {"plain": sent_into("plain_send", r, queues["plain"],
                                   lambda: platform_send(qs, tenant, queues["plain"], n, plain))}
        for patterns in PATTERN_COUNTS:
            target = attract(qs, tenant, r, patterns)
            sent_into(f"publish_{patterns}", r, target, lambda: publish(qs, tenant, n, plain, target))
            for i in range(patterns):
                qs.delete_queue(tenant, f"t{patterns}-{r}-{i}")
        limited, overflowing = f"limited-{r}", f"overflow-{r}"
        qs.put_queue(tenant, limited, "point_to_point", max_messages=10**12, max_bytes=10**15)
        sent_into("limited_send", r, limited, lambda: platform_send(qs, tenant, limited, n, plain))
        qs.put_queue(tenant, overflowing, "point_to_point", max_messages=OVERFLOW_LIMIT, overflow="drop_oldest")
        sent_into("overflow_send", r, overflowing, lambda: platform_send(qs, tenant, overflowing, n, plain),
                  depth=min(n, OVERFLOW_LIMIT))
        dropped = qs.get_queue(tenant, overflowing).totals["dropped"]
        check(dropped == max(0, n - OVERFLOW_LIMIT), f"overflow_send dropped {dropped}, not {n - OVERFLOW_LIMIT}")
        qs.delete_queue(tenant, limited)
        qs.delete_queue(tenant, overflowing)
        sent["priority"] = sent_into("priority_send", r, queues["priority"],
                                     lambda: platform_send(qs, tenant, queues["priority"], n, ranked))
        sent["ttl"] = sent_into("ttl_send", r, queues["ttl"],
                                lambda: platform_send(qs, tenant, queues["ttl"], n, expiring))
        for name in ("plain", "priority", "ttl"):
            _, seen, acked = timed(f"{name}_get_ack", r, lambda: platform_get_ack(qs, tenant, queues[name]))
            check(seen == sent[name] and acked == n, f"{name}_get_ack got {len(seen)} distinct ids, acked {acked}")
            qs.delete_queue(tenant, queues[name])
    return rates


def check_priority_order(qs: QueueServer, tenant: str) -> None:
    """Outside the timed loops: a get of the mixed queue hands out the highest priorities first."""
    qs.put_queue(tenant, "order-check", "point_to_point")
    payload = b"x"
    qs.send(tenant, "order-check", [OutgoingMessage(documents=(OutgoingDocument(payload),), priority=i % 10)
                                    for i in range(BATCH)])
    got = [d.envelope.priority for d in qs.get(tenant, "order-check", max_messages=BATCH)]
    check(got == sorted(got, reverse=True), f"priorities delivered out of order: {got[:20]}")
    qs.delete_queue(tenant, "order-check")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = parser_from_doc(__doc__)
    add_rounds(parser)
    args = parser.parse_args(argv)
    check_rounds(parser, args)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    tenant = f"bench-{uuid.uuid4().hex[:12]}"
    with BenchRun() as bench:
        client, valkey = start_valkey(bench, tenant)
        check_priority_order(QueueServer(client), tenant)
        progress(f"Valkey {valkey}, Python {platform.python_version()}: {args.messages} messages x "
                 f"{args.repeat} per phase, batches of {BATCH}, {PAYLOAD_BYTES} B")
        rates = run(client, args.messages, args.repeat, tenant)
    if bench.status is not None:
        return bench.status
    medians = {p: statistics.median(v) for p, v in rates.items()}
    result: dict[str, object] = {p: round(m) for p, m in medians.items()}

    def ratio(top: str, base: str) -> float:
        return round(statistics.median(t / b for t, b in zip(rates[top], rates[base])), 3)

    ratios = {f"{p}_ratio": ratio(p, "raw_send") for p in SEND_RATIOS}
    ratios.update({f"{p}_vs_plain_send": ratio(p, "plain_send") for p in SEND_RATIOS[1:]})
    ratios.update({f"{p}_ratio": ratio(p, "plain_get_ack") for p in GET_PHASES[1:]})
    for p, v in rates.items():
        print(f"{p:<17} {medians[p]:>10,.0f} msg/s  (median of {', '.join(f'{x:,.0f}' for x in v)})")
    for name, value in ratios.items():
        base = ("plain_get_ack" if "get_ack" in name else "plain_send" if name.endswith("_vs_plain_send")
                else "raw_send")
        print(f"{name:<27} {value:.3f}  (median over rounds, / {base})")
    result.update(ratios)
    result.update(messages=args.messages, batch=BATCH, repeat=args.repeat, python=platform.python_version(),
                  valkey=valkey)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
