"""Failed key checks slow their sender down: past a few a minute, an address gets 429.

Counted per client address and node in Redis
(``atomq.platform.failed_key_checks``), so every HTTP worker process of the
node shares the count, in a window that starts with an address's first
failure and expires with it. A throttled address is refused before its key
is looked at, so guessing keys goes no faster than the limit; an address
whose keys work is never counted, nor is a request that presents no key at
all (it guesses nothing), nor a failed execution token (signed by the node:
an expired one is no guess).

The refusal is decided from what this process learnt when it counted a
failure, so a request whose key works costs no store call: a worker process
that has not yet seen an address pass the limit lets at most one more guess
through before it does. Behind a proxy every client has the proxy's address:
there one client's failures throttle them all.
"""

from __future__ import annotations

import threading
import time

from atomq.errors import RateLimited
from atomq.platform.failed_key_checks import FailedKeyChecks
from atomq.platform.storage import Storage

MAX_FAILURES = 20
"""Failed key checks an address may make in one window before it is refused (the default
of the app's ``MAX_FAILED_KEY_CHECKS``)."""
MAX_FAILED_KEY_CHECKS = "MAX_FAILED_KEY_CHECKS"
WINDOW_S = 60


class KeyCheckThrottle:
    """Counts one node's failed key checks by client address."""

    def __init__(self, storage: Storage, node_id: str, max_failures: int = MAX_FAILURES) -> None:
        self._failures = FailedKeyChecks(storage, node_id)
        self.max_failures = max_failures
        self._refused_until: dict[str, float] = {}  # address -> monotonic time its window ends
        self._lock = threading.Lock()

    def check(self, address: str) -> None:
        """RateLimited when ``address`` failed too often in its current window."""
        with self._lock:
            until = self._refused_until.get(address)
            if until is not None and until <= time.monotonic():
                del self._refused_until[address]
                until = None
        if until is not None:
            retry_after = max(1, round(until - time.monotonic()))
            raise RateLimited(f"more than {self.max_failures} failed key checks from this address in {WINDOW_S} s: "
                              f"try again in {retry_after} s", retry_after=retry_after, scope="key_checks")

    def failed(self, address: str) -> None:
        """Counts one failed key check of ``address``; the first of a window starts it.
        Past the limit, this process refuses the address until the window ends."""
        failures, ttl_ms = self._failures.count(address, WINDOW_S)
        if failures >= self.max_failures:
            with self._lock:
                if len(self._refused_until) > 10_000:  # bounded: stale entries go first
                    now = time.monotonic()
                    self._refused_until = {a: u for a, u in self._refused_until.items() if u > now}
                self._refused_until[address] = time.monotonic() + max(ttl_ms, 1000) / 1000
