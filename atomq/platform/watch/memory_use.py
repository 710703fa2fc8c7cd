"""How much memory Redis uses and may use: what the server's memory state is judged on.

Read with ``INFO memory`` rather than kept anywhere, since the figure moves with every write and
costs one call. On a cluster each primary has its own memory: a tenant's keys live on the node of
its slot, and the server as a whole is as full as its fullest primary.
"""

from __future__ import annotations

from dataclasses import dataclass

from atomq.platform.store.storage import Storage


@dataclass(frozen=True)
class MemoryUse:
    """Redis's ``used_memory`` and its ``maxmemory`` (0: no limit), in bytes."""

    used_bytes: int
    max_bytes: int

    @property
    def share(self) -> float:
        """How full it is (0 without a limit)."""
        return self.used_bytes / self.max_bytes if self.max_bytes else 0.0


def memory_use(storage: Storage, key: str | None = None) -> MemoryUse:
    """Redis's memory use as it is now: on a cluster, of the primary holding ``key``, or without
    one of the fullest primary."""
    uses = [MemoryUse(int(m.get("used_memory", 0)), int(m.get("maxmemory", 0)))
            for m in storage.node_infos("memory", key)]
    return max(uses, key=lambda u: (u.share, u.used_bytes))
