#!/usr/bin/env python3
"""Throughput of the queue core against raw Redis streams, on one embedded Valkey.

Four phases, in this order, over --messages messages of one 1 KiB document
(payload) each, in batches of 100:

  raw_send          redis-py pipelined XADD, 100 per round trip (transaction=False)
  platform_send     QueueServer.send of 100 messages per call
  raw_get_ack       XREADGROUP COUNT 100 + XACK of the previous batch in one pipeline
  platform_get_ack  QueueServer.get(max_messages=100) + ack(ids=...) until drained

The four run as one round, --repeat rounds in a row, each platform phase right
after its raw baseline (so a machine whose speed drifts mid-run affects both
sides of a ratio alike); the median of the rounds is reported for each phase,
and each ratio is the median of the rounds' ratios.
Each round uses a fresh stream and a fresh queue: the send phase fills it, the
get+ack phase drains it. Only the loops are timed (time.perf_counter); filling
checks and deletes are not. Before each timed phase the AOF is rewritten
(BGREWRITEAOF, waited for), so no automatic rewrite - a fork and a child busy
on the same CPUs - lands inside one phase and not another.

The server is an EmbeddedValkey (AOF, appendfsync everysec) in a fresh
temporary data directory, removed at the end, also on Ctrl-C; the tenant id
is unique per run.

Output: a line per phase (median msg/s and each round) and per ratio on
stdout, progress on stderr, and as the LAST stdout line one JSON object with
raw_send, platform_send, raw_get_ack, platform_get_ack (medians, msg/s),
platform_send_ratio, platform_get_ack_ratio, plus messages, batch, repeat,
python and valkey. Exit status 1 when a correctness check fails (e.g. a
get+ack phase must consume exactly the N ids sent, each once), 130 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import sys
import tempfile
import time
import uuid
from typing import Callable

from atomq.platform import OutgoingDocument, OutgoingMessage, QueueServer
from atomq.platform.embedded import EmbeddedValkey

PAYLOAD_BYTES = 1024
BATCH = 100
PHASES = ("raw_send", "platform_send", "raw_get_ack", "platform_get_ack")
RATIOS = (("platform_send_ratio", "platform_send", "raw_send"),
          ("platform_get_ack_ratio", "platform_get_ack", "raw_get_ack"))


class BenchError(Exception):
    """A correctness check failed: the figures would be meaningless."""


def progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def check(condition: bool, what: str) -> None:
    if not condition:
        raise BenchError(what)


# -- raw Redis streams ----------------------------------------------------------


def raw_send(client, stream: str, n: int, payload: bytes) -> tuple[float, list[bytes]]:
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


def raw_get_ack(client, stream: str, group: str) -> tuple[float, set[bytes], int]:
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


# -- the run --------------------------------------------------------------------


def rate(n: int, seconds: float) -> float:
    return n / seconds if seconds > 0 else float("inf")


def quiesce_aof(client, timeout: float = 60.0) -> int:
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


def run(client, n: int, repeat: int, tenant: str) -> dict[str, list[float]]:
    """Runs ``repeat`` rounds of the four phases; returns msg/s per phase and round.

    Rounds, not one phase after another, and each platform phase right after
    its raw baseline, so a machine whose speed drifts during the run (a
    shared VM does, by tens of percent) affects both sides of a ratio alike.
    """
    rates: dict[str, list[float]] = {p: [] for p in PHASES}
    payload = os.urandom(PAYLOAD_BYTES)
    qs = QueueServer(client)
    batch = [OutgoingMessage(documents=(OutgoingDocument(payload),)) for _ in range(BATCH)]
    group = "g"

    def timed(phase: str, r: int, fn: Callable[[], tuple]) -> tuple:
        rewrites = quiesce_aof(client)
        result = fn()
        seconds = result[0]
        if int(client.info("persistence").get("aof_rewrites", 0)) != rewrites:
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

        # 3. raw_get_ack, draining that stream through a new consumer group
        client.xgroup_create(stream, group, id="0")
        _, seen, acked = timed("raw_get_ack", r, lambda: raw_get_ack(client, stream, group))
        check(seen == set(raw_ids), f"raw_get_ack read {len(seen)} distinct ids, not the {n} sent")
        check(acked == n, f"raw_get_ack: XACK acknowledged {acked} of {n}")
        pending = client.xpending(stream, group)["pending"]
        check(pending == 0, f"raw_get_ack left {pending} entries pending")
        client.delete(stream)

        # 4. platform_get_ack, draining that queue
        _, seen, acked = timed("platform_get_ack", r, lambda: platform_get_ack(qs, tenant, queue))
        check(seen == set(sent_ids), f"platform_get_ack got {len(seen)} distinct ids, not the {n} sent")
        check(acked == n, f"platform_get_ack: ack acknowledged {acked} of {n}")
        info = qs.get_queue(tenant, queue)
        check(info.depth == 0 and info.in_flight == 0,
              f"platform_get_ack left depth {info.depth}, in flight {info.in_flight}")
        qs.delete_queue(tenant, queue)
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
    args = parser.parse_args(argv)
    if args.messages < 1:
        parser.error("--messages must be at least 1")
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    return args


def _sigterm(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _sigterm)  # clean up on kill too, as on Ctrl-C
    tenant = f"bench-{uuid.uuid4().hex[:12]}"
    data_dir = server = client = None
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
        progress(f"Valkey {valkey}, Python {platform.python_version()}: "
                 f"{args.messages} messages x {args.repeat} per phase, batches of {BATCH}, {PAYLOAD_BYTES} B")
        rates = run(client, args.messages, args.repeat, tenant)
    except BenchError as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        # Ignore a second Ctrl-C while the server shuts down and the directory goes.
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            if client is not None:
                client.close()
            if server is not None:
                server.stop()
        finally:
            if data_dir is not None:
                shutil.rmtree(data_dir, ignore_errors=True)
            signal.signal(signal.SIGINT, previous)

    medians = {p: statistics.median(rates[p]) for p in PHASES}
    result: dict[str, object] = {p: round(medians[p]) for p in PHASES}
    # A ratio is the median of the rounds' ratios: each compares two phases run back to back.
    for name, top, base in RATIOS:
        result[name] = round(statistics.median(t / b for t, b in zip(rates[top], rates[base])), 3)
    for p in PHASES:
        each = ", ".join(f"{x:,.0f}" for x in rates[p])
        print(f"{p:<17} {medians[p]:>10,.0f} msg/s  (median of {each})")
    for name, top, base in RATIOS:
        print(f"{name:<23} {result[name]:.3f}  (median over rounds of {top} / {base})")
    result.update(messages=args.messages, batch=BATCH, repeat=args.repeat,
                  python=platform.python_version(), valkey=valkey)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
