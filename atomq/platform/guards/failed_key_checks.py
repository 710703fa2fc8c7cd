"""Failed key checks counted per client address, key id and node, in windows that expire with them.

Kept in Redis (``keys.failed_key_checks``) rather than in a process, so every
HTTP worker process of a node adds to the same count; a window starts with
an address's first failure and its key expires when it ends, so an address
that stops guessing leaves nothing behind. What the API does with the count
is ``atomq.api.key_checks``'s.
"""

from __future__ import annotations

from atomq.platform.store import keys as k
from atomq.platform.store.storage import Storage


class FailedKeyChecks:
    """One node's counts of failed key checks by client address."""

    def __init__(self, storage: Storage, node_id: str) -> None:
        self._storage = storage
        self._node_id = node_id

    def count(self, address: str, key_id: str, window_s: int) -> tuple[int, int]:
        """Counts one failure of ``address`` with key id ``key_id``, starting a window of
        ``window_s`` if none is open: the failures in the window so far and the milliseconds it
        has left (atomically)."""
        key = k.failed_key_checks(self._node_id, address, key_id)
        pipe = self._storage.client.pipeline(transaction=True)
        pipe.set(key, 0, ex=window_s, nx=True)
        pipe.incr(key)
        pipe.pttl(key)
        _, failures, ttl_ms = self._storage.call(pipe.execute)
        return int(failures), int(ttl_ms)
