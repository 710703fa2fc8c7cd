"""How much memory Redis uses and may use: what the server's memory state is judged on.

Read with ``INFO memory`` on every ``GET /v1/server`` and scrape rather than
kept anywhere, since the figure moves with every write and costs one call.
"""

from __future__ import annotations

from dataclasses import dataclass

from atomq.platform.storage import Storage


@dataclass(frozen=True)
class MemoryUse:
    """Redis's ``used_memory`` and its ``maxmemory`` (0: no limit), in bytes."""

    used_bytes: int
    max_bytes: int


def memory_use(storage: Storage) -> MemoryUse:
    """Redis's memory use as it is now."""
    memory = storage.call(storage.client.info, "memory")
    return MemoryUse(int(memory.get("used_memory", 0)), int(memory.get("maxmemory", 0)))
