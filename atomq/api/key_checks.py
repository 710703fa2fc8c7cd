"""Failed key checks slow their sender down: past a few a minute, an address gets 429.

Counted per client address and node in Redis (``keys.failed_key_checks``), so
every HTTP worker process of the node shares the count, in a window that
starts with an address's first failure and expires with it. A throttled
address is refused before its key is looked at, so guessing keys goes no
faster than the limit; an address whose keys work is never counted, nor is
a request that presents no key at all (it guesses nothing).
"""

from __future__ import annotations

from atomq.errors import RateLimited
from atomq.platform import keys as k
from atomq.platform.storage import Storage

MAX_FAILURES = 20
"""Failed key checks an address may make in one window before it is refused (the default
of the app's ``MAX_FAILED_KEY_CHECKS``)."""
MAX_FAILED_KEY_CHECKS = "MAX_FAILED_KEY_CHECKS"
WINDOW_S = 60


class KeyCheckThrottle:
    """Counts one node's failed key checks by client address."""

    def __init__(self, storage: Storage, node_id: str, max_failures: int = MAX_FAILURES) -> None:
        self._storage = storage
        self._node_id = node_id
        self.max_failures = max_failures

    def check(self, address: str) -> None:
        """RateLimited when ``address`` failed too often in its current window."""
        key = k.failed_key_checks(self._node_id, address)
        failures = self._storage.call(self._storage.client.get, key)
        if failures is not None and int(failures) >= self.max_failures:
            ttl = self._storage.call(self._storage.client.ttl, key)
            retry_after = max(1, int(ttl)) if ttl is not None and ttl > 0 else WINDOW_S
            raise RateLimited(f"more than {self.max_failures} failed key checks from this address in {WINDOW_S} s: "
                              f"try again in {retry_after} s", retry_after=retry_after, scope="key_checks")

    def failed(self, address: str) -> None:
        """Counts one failed key check of ``address``; the first of a window starts it."""
        key = k.failed_key_checks(self._node_id, address)
        pipe = self._storage.client.pipeline(transaction=True)
        pipe.set(key, 0, ex=WINDOW_S, nx=True)
        pipe.incr(key)
        self._storage.call(pipe.execute)
