"""The queues this process's SQS requests named a moment ago, with their SQS fields: the message
actions (send, receive, delete, visibility) read a queue through it rather than from the store.

Why: every SQS request names its queue by URL, and SQS's fields (MaximumMessageSize, the
receive's wait, the visibility) are not the native send's: reading them costs a store round trip
of its own, as much as the send's script. A message action takes what this process read at most
``RECENT_S`` (1 s) ago; the queue actions (create, attributes, purge, delete, tags) always read
the store and leave what they read here, and those that change a queue drop it, so a change made
through this process holds at once and one made elsewhere within a second. SQS itself lets a
queue's attribute changes take up to 60 seconds to reach every server. A queue deleted elsewhere
meanwhile is still refused: the native send, get and ack find no queue (QueueDoesNotExist).
"""

from __future__ import annotations

import time

RECENT_S = 1.0
MAX_ENTRIES = 10_000
"""Queues one process keeps at most: past it, it starts again empty."""


class RecentQueues:
    """(tenant, queue) -> the fields last read, for ``RECENT_S``; only existing queues are kept."""

    def __init__(self) -> None:
        self._held: dict[tuple[str, str], tuple[float, dict[str, str]]] = {}

    def get(self, tenant: str, name: str) -> dict[str, str] | None:
        held = self._held.get((tenant, name))
        return held[1] if held is not None and held[0] > time.monotonic() else None

    def keep(self, tenant: str, name: str, fields: dict[str, str]) -> None:
        if len(self._held) >= MAX_ENTRIES:
            self._held.clear()
        self._held[(tenant, name)] = (time.monotonic() + RECENT_S, fields)

    def forget(self, tenant: str, name: str) -> None:
        self._held.pop((tenant, name), None)
