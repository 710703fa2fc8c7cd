"""Rate limits on sends, as docs/concepts.md ("Rate limits") states them.

Two windows apply at once, both kept per node: the node's
(``incoming_rate_limit_per_minute``) and the tenant's
(``rate_limit_per_minute``). A window opens at the first counted request
and lasts ``rate_limit_window_s``; past the limit, requests are refused until
it closes, and the next request opens a new one. One request counts once,
however many messages it carries.

The two windows live in different cluster slots, so no one script may take
room in both: the node's window is taken first and handed back if the
tenant's refuses, and both are handed back if the send then fails for any
other reason, so a refused request uses up no room in either.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager

from atomq.errors import AtomqError, RateLimited
from atomq.platform.store import keys as k
from atomq.platform.store.storage import Storage


def retry_after_s(ms_left: int) -> int:
    """Whole seconds until the window closes, at least 1."""
    return max(1, math.ceil(ms_left / 1000))


class RateLimiter:
    """The send windows of one node."""

    def __init__(self, storage: Storage, node_id: str) -> None:
        self._storage = storage
        self.node_id = node_id

    def _take(self, key: str, limit: int, window_ms: int, whose: str) -> str | None:
        if limit <= 0:
            return None
        allowed, value = self._storage.run("window", [key], ["take", limit, window_ms, ""])
        if not allowed:
            seconds = retry_after_s(int(value))
            raise RateLimited(
                f"{whose} allows {limit} send requests per {window_ms / 1000:g} s window; "
                f"the window closes in {seconds} s",
                retry_after=seconds, limit=limit, window=whose)
        return str(value.decode() if isinstance(value, bytes) else value)

    def _give(self, key: str, window: str | None) -> None:
        if window is not None:
            self._storage.run("window", [key], ["give", 0, 0, window])

    @contextmanager
    def send(self, tenant: str, tenant_limit: int, node_limit: int, window_s: float) -> Iterator[None]:
        """Counts one send request in both windows for the ``with`` body.

        Raises RateLimited (taking no room) when a window is full; hands the
        room back when the body fails with an atomq error (the send was
        refused, not made).
        """
        window_ms = round(window_s * 1000)
        node_key = k.node_rate_window(self.node_id)
        tenant_key = k.tenant_rate_window(tenant, self.node_id)
        node_window = self._take(node_key, node_limit, window_ms, "this node")
        try:
            tenant_window = self._take(tenant_key, tenant_limit, window_ms, "the tenant's rate limit")
        except RateLimited:
            self._give(node_key, node_window)
            raise
        try:
            yield
        except AtomqError:
            self._give(tenant_key, tenant_window)
            self._give(node_key, node_window)
            raise
