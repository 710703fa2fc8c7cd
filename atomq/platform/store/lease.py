"""Leases: work that must happen once across all nodes is done by the holder.

The holder renews its lease well within the time to live; when a node
dies, its lease runs out and another node takes it. Work done under a lease
is idempotent anyway, so a holder that stalls past its lease and a new
holder overlapping for a moment waste effort but break nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from atomq.platform.store import keys as k
from atomq.platform.store.storage import Storage, translate


class Lease:
    """One named lease, held (or not) by ``holder``."""

    def __init__(self, storage: Storage, name: str, holder: str, ttl_s: float) -> None:
        self._storage = storage
        self.key = k.lease_key(name)
        self.holder = holder
        self.ttl_ms = round(ttl_s * 1000)

    def acquire(self) -> bool:
        """Takes the lease if free, renews it if ours; True while we hold it."""
        return bool(self._storage.run("lease", [self.key], ["acquire", self.holder, self.ttl_ms]))

    @staticmethod
    def acquire_all(storage: Storage, leases: Sequence[Lease]) -> list[bool]:
        """:meth:`acquire` of each of ``leases``, in one round trip (one a node on a cluster): a
        supervisor renews the leases of all its listeners so."""
        replies = storage.run_many("lease", [([lease.key], ["acquire", lease.holder, lease.ttl_ms])
                                             for lease in leases])
        failed = next((reply for reply in replies if isinstance(reply, Exception)), None)
        if failed is not None:
            raise translate(failed)
        return [bool(reply) for reply in replies]

    def release(self) -> bool:
        """Gives the lease up at once (on a clean stop), so another node need not wait it out."""
        return bool(self._storage.run("lease", [self.key], ["release", self.holder, 0]))


def holder(storage: Storage, name: str) -> str | None:
    """Who holds lease ``name`` now (the holder's id), or None while nobody does.

    Read by whatever must act on one node only without taking the lease itself,
    such as the metrics export (see ``atomq.api.metrics``).
    """
    raw: bytes | None = storage.call(storage.client.get, k.lease_key(name))
    return None if raw is None else raw.decode()


def holder_node(storage: Storage, name: str) -> str | None:
    """The node whose process holds lease ``name`` (held as ``<node id>:<pid>``), or None while
    nobody does: the node that exports the shared metrics and that the overview marks."""
    held = holder(storage, name)
    return None if held is None else held.partition(":")[0]
