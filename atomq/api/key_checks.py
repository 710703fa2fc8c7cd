"""Failed key checks slow their sender down: past a few a minute, an address gets 429 for that key.

Counted per client address, key id and node in Redis
(``atomq.platform.guards.failed_key_checks``), so every HTTP worker process of the
node shares the count, in a window that starts with the first failure and
expires with it. What is throttled is guessing one key's secret: a throttled
(address, key id) is refused before its key is looked at, so guessing a key
goes no faster than the limit, while the other keys presented from that
address (everyone behind one proxy) still work. A key id is the one an API
key names; a longer string without one counts as a guess of the owner key,
anything else as one malformed key. An address whose keys work is never
counted, nor is a request that presents no key at all (it guesses nothing),
nor a failed execution token (signed by the node: an expired one is no
guess). The dashboard's sign-in counts as the API does.

The refusal is decided from what this process learnt when it counted a
failure, so a request whose key works costs no store call: a worker process
that has not yet seen an address pass the limit lets at most one more guess
through before it does.
"""

from __future__ import annotations

import threading
import time

from atomq.errors import RateLimited
from atomq.platform.guards.failed_key_checks import FailedKeyChecks
from atomq.platform.store.storage import Storage
from atomq.tenants.api_keys import API_KEY

MAX_FAILURES = 20
"""Failed key checks an address may make in one window before it is refused (the default
of the app's ``MAX_FAILED_KEY_CHECKS``)."""
MAX_FAILED_KEY_CHECKS = "MAX_FAILED_KEY_CHECKS"
WINDOW_S = 60
OWNER_GUESS_CHARS = 32
"""A presented string of this length or more that names no key id is counted as a guess of the owner
key (which is at least this long): it cannot lock out the holders of API keys behind the address."""


def guessed_key_id(presented: str) -> str:
    """Which key a presented string tries: its key id, ``owner``, or ``-`` (a malformed key)."""
    match = API_KEY.fullmatch(presented)
    if match is not None:
        return match.group(1)
    return "owner" if len(presented) >= OWNER_GUESS_CHARS else "-"


class KeyCheckThrottle:
    """Counts one node's failed key checks by client address and key id."""

    def __init__(self, storage: Storage, node_id: str, max_failures: int = MAX_FAILURES) -> None:
        self._failures = FailedKeyChecks(storage, node_id)
        self.max_failures = max_failures
        self._refused_until: dict[tuple[str, str], float] = {}  # (address, key id) -> when its window ends
        self._lock = threading.Lock()

    def check(self, address: str, presented: str) -> None:
        """RateLimited when ``address`` failed too often in its current window with the key
        ``presented`` tries."""
        self.check_key_id(address, guessed_key_id(presented))

    def check_key_id(self, address: str, key_id: str) -> None:
        """``check`` for a key named by its id (as an SQS access key id names it), so a signature
        check and a bearer key count towards the same limit."""
        guess = (address, key_id)
        with self._lock:
            until = self._refused_until.get(guess)
            if until is not None and until <= time.monotonic():
                del self._refused_until[guess]
                until = None
        if until is not None:
            retry_after = max(1, round(until - time.monotonic()))
            raise RateLimited(f"more than {self.max_failures} failed checks of this key from this address in "
                              f"{WINDOW_S} s: try again in {retry_after} s", retry_after=retry_after,
                              scope="key_checks")

    def failed(self, address: str, presented: str) -> None:
        """Counts one failed check of the key ``presented`` tries from ``address``; the first of a
        window starts it. Past the limit, this process refuses that key from that address until the
        window ends."""
        self.failed_key_id(address, guessed_key_id(presented))

    def failed_key_id(self, address: str, key_id: str) -> None:
        """``failed`` for a key named by its id."""
        guess = (address, key_id)
        failures, ttl_ms = self._failures.count(*guess, WINDOW_S)
        if failures >= self.max_failures:
            with self._lock:
                if len(self._refused_until) > 10_000:  # bounded: stale entries go first
                    now = time.monotonic()
                    self._refused_until = {a: u for a, u in self._refused_until.items() if u > now}
                self._refused_until[guess] = time.monotonic() + max(ttl_ms, 1000) / 1000
