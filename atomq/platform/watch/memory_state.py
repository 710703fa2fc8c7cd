"""The memory state: green, yellow, orange or red as the store fills towards its ``maxmemory``, and
which sends each state refuses.

A broker that waits for the store to refuse writes has nothing left for the work that frees
memory: the states refuse the least urgent sends first (by priority), while gets, acks, nacks and
deletes always run (their scripts are flagged to run at maxmemory: ``scripts.ALWAYS_RUN``). Every
node reads the store's own figures (``INFO memory``) at most every ``READ_S``; the first node that
sees a state change records it in the store, so it is logged, counted and kept in the history once
however many nodes see it.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from atomq.errors import InvalidInput, StorageError
from atomq.platform.store import keys as k
from atomq.platform.store.refreshed import Refreshed
from atomq.platform.store.storage import STORE_ERRORS, Storage
from atomq.platform.watch.memory_use import MemoryUse, memory_use

log = logging.getLogger("atomq.memory")

STATES = ("green", "yellow", "orange", "red")
REFUSED_BELOW = {"green": 0, "yellow": 4, "orange": 7, "red": 10}
"""Each state refuses a send holding a message of a priority below this (red: every send)."""
READ_S = 0.5
"""How old a node's reading of the store's memory may be when a send is judged by it: a send
costs an ``INFO memory`` at most twice a second per process, and memory grows by at most what
half a second of sends stores between two readings."""
HISTORY = 100
"""State changes the store keeps (the dashboard's history)."""


@dataclass(frozen=True)
class MemoryThresholds:
    """The share of the store's memory limit at which each state begins (0 < yellow < orange <
    red <= 1); below ``yellow`` the state is green."""

    yellow: float = 0.70
    orange: float = 0.85
    red: float = 0.95

    def __post_init__(self) -> None:
        shares = (self.yellow, self.orange, self.red)
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in shares) \
                or not 0 < self.yellow < self.orange < self.red <= 1:
            raise InvalidInput("memory_thresholds must hold yellow, orange and red with 0 < yellow < orange < "
                               "red <= 1", field="memory_thresholds")

    def state(self, use: MemoryUse) -> str:
        """The state at ``use``; green where the store has no limit."""
        if not use.max_bytes:
            return "green"
        share = use.used_bytes / use.max_bytes
        if share < self.yellow:
            return "green"
        if share < self.orange:
            return "yellow"
        return "orange" if share < self.red else "red"


def refuses(state: str, lowest_priority: int) -> bool:
    """Whether ``state`` refuses a send whose lowest message priority is ``lowest_priority``."""
    return lowest_priority < REFUSED_BELOW[state]


@dataclass(frozen=True)
class StateChange:
    """A change of the memory state as the store recorded it."""

    at: float
    state: str
    used_bytes: int
    max_bytes: int


class MemoryWatch:
    """One node's view of the memory state: the store's figures read again when older than
    ``READ_S``, judged by the thresholds as they are now. On a cluster a tenant's state is its
    primary's; the server's is its fullest primary's, and that one is recorded."""

    def __init__(self, storage: Storage, thresholds: Callable[[], MemoryThresholds]) -> None:
        self._storage = storage
        self._thresholds = thresholds
        self._lock = threading.Lock()
        self._read: dict[str, tuple[float, MemoryUse]] = {}
        self._last: str | None = None
        self._server = Refreshed(self._server_reading, READ_S, "memory state of every primary")

    def state(self, tenant: str | None = None) -> str:
        return self.reading(tenant)[0]

    def last_state(self, tenant: str | None = None) -> str | None:
        """The state as this node last judged it, without reading the store (None before the first):
        the server's, or on a cluster the state of the primary holding ``tenant``'s keys."""
        if tenant is None or not self._storage.is_cluster:
            return self._last
        try:
            read = self._read.get(self._storage.node_name(k.TenantKeys(tenant).usage))
        except STORE_ERRORS:  # the client's map of the slots is being rebuilt: the server's state
            return self._last
        return self._last if read is None else self._thresholds().state(read[1])

    def reading(self, tenant: str | None = None) -> tuple[str, MemoryUse]:
        """The state and the figures it was judged on: the server's, or the tenant's primary's."""
        if tenant is None or not self._storage.is_cluster:
            return self._server_reading()
        # The server's state is kept current (and recorded) in the background: reading every primary
        # here would hold this tenant's send while another primary fails over or is unreachable.
        try:
            self._server.get()
        except StorageError:
            pass  # this process's first reading: another primary is failing over
        return self._judged(k.TenantKeys(tenant).usage)

    def _server_reading(self) -> tuple[str, MemoryUse]:
        """The server's state (its fullest primary's), recorded when it changed."""
        state, use = self._judged(None)
        with self._lock:
            before, self._last = self._last, state
        if state != before:
            try:
                self._record(state, use)
            except Exception:
                self._last = before  # recorded by the next reading instead
                raise
        return state, use

    def _judged(self, key: str | None) -> tuple[str, MemoryUse]:
        """The state of the fullest primary (``key`` None) or of the one holding ``key``."""
        where = "" if key is None else self._storage.node_name(key)
        read = self._read.get(where)
        if read is None or time.monotonic() - read[0] > READ_S:
            read = (time.monotonic(), memory_use(self._storage, key))
            self._read[where] = read
        return self._thresholds().state(read[1]), read[1]

    def _record(self, state: str, use: MemoryUse) -> None:
        """Records a state this node saw change in the store; the node whose record changed it logs it."""
        changed = self._storage.run("memory_state", [k.MEMORY_STATE_KEY, k.MEMORY_HISTORY_KEY],
                                    [state, use.used_bytes, use.max_bytes, HISTORY])
        if changed:
            level = logging.INFO if state == "green" else logging.WARNING
            log.log(level, "memory state %s: the store uses %d of %d bytes; %s", state, use.used_bytes,
                    use.max_bytes, refusal_rule(state))

    def history(self) -> list[StateChange]:
        """The last state changes, newest first."""
        raw = self._storage.call(self._storage.client.lrange, k.MEMORY_HISTORY_KEY, 0, HISTORY - 1)
        out = []
        for entry in raw:
            at, state, used, most = entry.decode().split("|")
            out.append(StateChange(at=int(at) / 1000, state=state, used_bytes=int(used), max_bytes=int(most)))
        return out

    def changes(self) -> dict[str, int]:
        """How often the state changed to each state, over the store's life."""
        raw = self._storage.call(self._storage.client.hmget, k.MEMORY_STATE_KEY, [f"n:{s}" for s in STATES])
        return {state: int(n or 0) for state, n in zip(STATES, raw)}


def refusal_rule(state: str) -> str:
    """What ``state`` refuses, in words: for the log, the dashboard and the refusal itself."""
    below = REFUSED_BELOW[state]
    if not below:
        return "every send is taken"
    if state == "red":
        return "every send, and the creation of queues, subscribers and listeners, is refused"
    return f"sends holding a message of priority below {below} are refused"
