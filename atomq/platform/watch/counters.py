"""What happened to each queue's messages, counted by the scripts that do it.

A send, a delivery, an ack, a nack, an ack time-out and a move to the dead
letter queue each count themselves inside the script that makes the change,
so the totals are exact across every node and process, survive a crash of
any of them, and cost no extra round trip. The scripts keep them in the
queue's cfg hash (``n:<kind>``) together with a ring of 10-second buckets of
sends and acks (``r:s<slot>``, ``r:a<slot>``, each ``"<bucket>:<count>"``),
which is what the dashboard's rate chart draws: every node reads the same
buckets. Refused sends (rate limit, quota, a queue's or the server's limits) are
counted per tenant, by reason.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from atomq.errors import AtomqError
from atomq.platform.queues.names import check_tenant_id
from atomq.platform.store import keys as k
from atomq.platform.store.storage import Storage

QUEUE_COUNTS = ("sent", "delivered", "redelivered", "acked", "nacked", "dead_lettered", "ack_timeouts",
                "expired", "superseded", "dropped", "moved")
"""The per-queue totals the scripts keep, in the order ``queue_totals`` reads them (``moved``: the
messages move tasks took out of the queue, counted on their source)."""
REFUSALS = ("rate_limited", "quota_rejected", "queue_full", "server_full", "memory_low", "not_durable",
            "too_many_copies")
"""The per-tenant totals of refused sends, by reason: a rate-limit window, the tenant's disk
quota, a queue's limit (or a flow_control queue that stayed full), the server's limits, the
memory state, and sends to a sync queue not synced in time (stored, but answered 503)."""
REFUSAL_BY_CODE = {"rate_limited": "rate_limited", "quota_exceeded": "quota_rejected", "queue_full": "queue_full",
                   "server_full": "server_full", "memory_low": "memory_low", "not_durable": "not_durable",
                   "too_many_copies": "too_many_copies"}
"""Each refusing error's code and the total it counts in."""
RATE_BUCKET_S = 10
RATE_SLOTS = 32
"""As RATE_SLOTS in scripts/_lib_state.lua: the ring holds this many buckets, the oldest being overwritten."""
MAX_RATE_BUCKETS = RATE_SLOTS - 1
"""The current bucket and the ones before it that the ring still holds whole."""


@dataclass(frozen=True)
class RateBucket:
    """Sends and acks of one queue in the 10 seconds from ``start`` (epoch seconds)."""

    start: int
    sent: int
    acked: int


class MessageCounters:
    """Reads the queues' counters and counts refused sends."""

    def __init__(self, storage: Storage) -> None:
        self._storage = storage

    def queue_totals(self, tenant: str, queues: Sequence[str]) -> dict[str, dict[str, int]]:
        """Each queue's totals (QUEUE_COUNTS); a queue removed meanwhile is left out."""
        tk = k.TenantKeys(check_tenant_id(tenant))
        fields = ["model"] + [f"n:{kind}" for kind in QUEUE_COUNTS]
        pipe = self._storage.client.pipeline(transaction=False)
        for name in queues:
            pipe.hmget(tk.queue(name).config, fields)
        out: dict[str, dict[str, int]] = {}
        for name, values in zip(queues, self._storage.call(pipe.execute)):
            if values[0] is not None:
                out[name] = {kind: int(v or 0) for kind, v in zip(QUEUE_COUNTS, values[1:])}
        return out

    def rates(self, tenant: str, queue: str, buckets: int = 30) -> list[RateBucket]:
        """The last ``buckets`` 10-second buckets of sends and acks, oldest first, the current one last."""
        config = k.TenantKeys(check_tenant_id(tenant)).queue(queue).config
        return [RateBucket(start=start, sent=n["s"], acked=n["a"])
                for start, n in read_ring(self._storage, config, "sa", buckets)]

    def refusals(self, tenant: str) -> dict[str, int]:
        """The tenant's totals of refused sends (REFUSALS)."""
        values = self._storage.call(self._storage.client.hmget, k.TenantKeys(check_tenant_id(tenant)).refusals,
                                    list(REFUSALS))
        return {kind: int(v or 0) for kind, v in zip(REFUSALS, values)}

    @contextmanager
    def counting_refusals(self, tenant: str) -> Iterator[None]:
        """Counts a send refused inside the block by its reason (REFUSAL_BY_CODE), and lets the refusal go on."""
        try:
            yield
        except AtomqError as exc:
            kind = REFUSAL_BY_CODE.get(exc.code)
            if kind is not None:
                self._storage.run("refusal", [k.TenantKeys(tenant).refusals], [kind])
            raise


def read_ring(storage: Storage, key: str, kinds: str, buckets: int) -> list[tuple[int, dict[str, int]]]:
    """The last ``buckets`` 10-second buckets of the rings ``kinds`` (one letter each) that the
    scripts' ``count_rate`` keeps in hash ``key``, oldest first, the current one last: each
    bucket's start (epoch seconds) and its count of each kind."""
    if not 1 <= buckets <= MAX_RATE_BUCKETS:
        raise ValueError(f"buckets must be from 1 to {MAX_RATE_BUCKETS}")
    fields = [f"r:{kind}{slot}" for kind in kinds for slot in range(RATE_SLOTS)]
    # Two calls, not a pipeline: TIME names no key, so a cluster client routes each on its own.
    seconds, _ = storage.call(storage.client.time)
    values = storage.call(storage.client.hmget, key, fields)
    held: dict[tuple[str, int], int] = {}
    for field, value in zip(fields, values):
        if value is not None:
            bucket, _, n = value.partition(b":")
            held[(field[2], int(bucket))] = int(n)
    current = seconds // RATE_BUCKET_S
    return [(b * RATE_BUCKET_S, {kind: held.get((kind, b), 0) for kind in kinds})
            for b in range(current - buckets + 1, current + 1)]
