"""How much memory the server's stores other than messages take, measured now and then.

The server reports three stores (docs/operating.md, "Server settings"): messages (kept exactly by the usage
counters, de-duplication markers included, since they count against the
tenants' quotas), temporary data (work under way: in-flight deliveries, the
listeners' executions and processed-message windows, rate windows) and the job scheduler (the redelivery schedules and the rq
execution queues with their jobs). The last two are not counted with each
write; the maintenance lease holder measures them with MEMORY USAGE every
``MEASURE_EVERY_S`` and keeps the figures in Redis, so every node reports
the same and none pays for a measurement on a request.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

import redis

from atomq.platform.store import keys as k
from atomq.platform.store import listener_keys as lk
from atomq.platform.store import send_keys
from atomq.platform.store.connection import RedisClient
from atomq.platform.store.storage import Storage, translate


class Measured(Protocol):
    """What a measurement reads through: the queue server, as the maintenance loop hands it over
    (the queue server imports the maintenance, which measures: this names only what it reads of
    the server, so the three modules do not import each other round)."""

    @property
    def client(self) -> RedisClient: ...

    @property
    def storage(self) -> Storage: ...

    def tenants(self) -> list[str]: ...

    def destinations(self, tenant: str) -> list[tuple[k.QueueKeys, k.DestinationKeys]]: ...


MEASURE_EVERY_S = 30.0
_BATCH = 500


def memory_of(client: Any, keys: Iterable[str | bytes]) -> int:
    """The summed MEMORY USAGE of ``keys`` (missing keys count 0), in pipelined batches."""
    total = 0
    batch: list[str | bytes] = []

    def flush() -> int:
        pipe = client.pipeline(transaction=False)
        for key in batch:
            pipe.memory_usage(key)
        sizes = pipe.execute()
        batch.clear()
        return sum(int(s or 0) for s in sizes)

    for key in keys:
        batch.append(key)
        if len(batch) >= _BATCH:
            total += flush()
    if batch:
        total += flush()
    return total


def _tenant_keys(qs: Measured, tenant: str) -> tuple[list[str], list[str]]:
    """A tenant's (temporary, job scheduler) keys, from its indexes."""
    temporary: list[str] = []
    scheduler: list[str] = []
    for _, d in qs.destinations(tenant):
        temporary.append(d.inflight)
        scheduler.append(d.sched)
    for raw in qs.client.hkeys(lk.tenant_listeners(tenant)):
        listener = lk.ListenerKeys(tenant, raw.decode() if isinstance(raw, bytes) else raw)
        temporary += [listener.executions, listener.pending, listener.done]
    return temporary, scheduler


def measure(qs: Measured, job_queue_bytes: Callable[[], int] | None = None) -> dict[str, int]:
    """``temporary_bytes`` and ``job_scheduler_bytes`` as they are now.

    ``job_queue_bytes`` measures the execution job queues, which live in
    rq's Redis and under rq's key names (see ``atomq.workers.worker``).
    """
    try:
        return _measure(qs, job_queue_bytes)
    except redis.RedisError as exc:  # MEMORY USAGE is missing from some Redis look-alikes
        raise translate(exc) from None


def _measure(qs: Measured, job_queue_bytes: Callable[[], int] | None) -> dict[str, int]:
    temporary: list[str | bytes] = []
    scheduler: list[str | bytes] = []
    for tenant in qs.tenants():
        t, s = _tenant_keys(qs, tenant)
        temporary += t
        scheduler += s
    for pattern in (*k.TEMPORARY_KEY_PATTERNS, send_keys.STAGING_PATTERN):
        temporary += qs.client.scan_iter(match=pattern, count=1000)
    sizes = {"temporary_bytes": memory_of(qs.client, temporary), "job_scheduler_bytes": memory_of(qs.client, scheduler)}
    if job_queue_bytes is not None:
        sizes["job_scheduler_bytes"] += job_queue_bytes()
    return sizes


def record(qs: Measured, sizes: dict[str, int]) -> None:
    qs.storage.call(qs.client.hset, k.STORE_SIZES_KEY, mapping={**sizes, "measured_at": time.time()})


def recorded(qs: Measured) -> dict[str, int] | None:
    """The last measurement, or None before the first."""
    raw = qs.storage.call(qs.client.hgetall, k.STORE_SIZES_KEY)
    if not raw:
        return None
    return {"temporary_bytes": int(raw[b"temporary_bytes"]), "job_scheduler_bytes": int(raw[b"job_scheduler_bytes"])}
