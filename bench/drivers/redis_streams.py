"""Raw Redis streams through redis-py: the baseline the queue core is measured against.

The fastest a client can send to and drain one stream with the same batches,
so a ratio against it says what atomq's own work costs.
"""

from __future__ import annotations

import time

import redis

from .serve_node import check
from .workload import BATCH


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
