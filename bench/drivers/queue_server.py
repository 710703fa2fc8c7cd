"""The atomq library in the bench's process: QueueServer's send, get and ack.

The queue core without HTTP, on the same Valkey as the raw baseline, so its
ratio to raw Redis is the cost of the platform's scripts alone.
"""

from __future__ import annotations

import time

from atomq.platform import OutgoingMessage, QueueServer

from .serve_node import check
from .workload import BATCH, PAYLOAD_BYTES


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


def platform_consume(qs: QueueServer, tenant: str, queue: str) -> tuple[float, set[str], int]:
    """take(max_messages=BATCH, ack_ids=<the previous batch>) until a take returns nothing: one call
    and one round trip a batch, as the raw baseline's pipelined XREADGROUP + XACK."""
    seen: set[str] = set()
    read = acked = 0
    previous: list[str] | None = None
    t0 = time.perf_counter()
    while True:
        taken = qs.take(tenant, queue, max_messages=BATCH, ack_ids=previous)
        acked += taken.acked or 0
        if not taken.deliveries:
            break
        previous = [d.id for d in taken.deliveries]
        first = taken.deliveries[0].documents
        check(len(first) == 1 and len(first[0].data) == PAYLOAD_BYTES,
              f"delivery {previous[0]} does not carry one {PAYLOAD_BYTES}-byte document")
        seen.update(previous)
        read += len(previous)
    elapsed = time.perf_counter() - t0
    check(read == len(seen), f"platform_consume delivered {read} messages but only {len(seen)} distinct ids")
    return elapsed, seen, acked
