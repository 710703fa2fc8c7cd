"""Which queues a topic reaches: each tenant's topic patterns, matched in the node and cached.

A publish must name every queue its script writes, so it needs the
tenant's patterns before it runs. The cache keeps a matcher per tenant with
the version of the patterns it was built from; the send script checks that
version, so a publish costs no extra round trip and a stale matcher costs
one retry, never a wrong publish.

A stale matcher is brought up to date with what moved: every change of the
patterns logs its queue with the version it made (``keys.TenantKeys.topic_changes``),
and one script call reads the queues changed since the matcher's version
with their patterns now (``topics_since.lua``), which
:meth:`TopicMatcher.updated` applies. Only a matcher further behind than the
log, or data an older atomq changed without logging, is rebuilt from all
the patterns.

Each HTTP worker process keeps its own matchers, updated this way, rather
than one copy shared by the node's processes or kept in the store: a
matcher is a graph of Python objects that another process cannot read in
place, so sharing it would mean a matcher of its own over a serialised
form in shared memory, or a process that matches for the others at an IPC
round trip a publish (what the cache saves); matching in the store would
walk the tree on the store's one thread, which every tenant waits on.
Per worker, a change of one queue's patterns costs each worker a round
trip and a few milliseconds at most (what moved: 100 patterns out, 100 in), and
memory is what the patterns' text takes (17.9 MiB at a tenant's bound of
10,000 patterns of 120 levels) per publishing tenant and worker.
"""

from __future__ import annotations

import json
import threading

from atomq.platform.queues.topics import TopicMatcher
from atomq.platform.shared import Shared
from atomq.platform.store import keys as k

MAX_CACHED_TENANTS = 10_000
"""Past this many cached matchers the cache starts over, so it stays bounded however many tenants publish."""

VERSION_FIELD = "#v"


class TopicIndex:
    """The topic matchers of one queue server, by tenant."""

    def __init__(self, shared: Shared) -> None:
        self._shared = shared
        self._matchers: dict[str, tuple[str, TopicMatcher]] = {}
        self._lock = threading.Lock()
        self.rebuilds = 0
        """Matchers built from all of a tenant's patterns: its first, and one the change log no longer reached."""
        self.updates = 0
        """Matchers updated with the changes since the version they held."""

    def matcher(self, tenant: str, refresh: bool = False) -> tuple[str, TopicMatcher]:
        """The tenant's matcher and the version of the patterns it holds, from the cache unless
        ``refresh``: then brought up to the store's version, by what changed if the log says."""
        cached = self._matchers.get(tenant)
        if cached is not None and not refresh:
            return cached
        entry = self._updated(tenant, cached) if cached is not None else None
        if entry is None:
            entry = self._rebuilt(tenant)
        with self._lock:
            if len(self._matchers) > MAX_CACHED_TENANTS:
                self._matchers.clear()
            self._matchers[tenant] = entry
        return entry

    def _updated(self, tenant: str, cached: tuple[str, TopicMatcher]) -> tuple[str, TopicMatcher] | None:
        """``cached`` updated with the changes since its version, or None when the log does not reach back."""
        version, matcher = cached
        tk = k.TenantKeys(tenant)
        reply = self._shared.storage.run("topics_since", [tk.topic_patterns, tk.topic_changes], [version])
        now = reply[0].decode()
        if reply[1] != 1:
            return None
        if now == version:
            return cached
        changes = {queue.decode(): json.loads(ps) if ps else [] for queue, ps in zip(reply[2::2], reply[3::2])}
        with self._lock:
            self.updates += 1
        return now, matcher.updated(changes)

    def _rebuilt(self, tenant: str) -> tuple[str, TopicMatcher]:
        raw = self._shared.storage.call(self._shared.client.hgetall, k.TenantKeys(tenant).topic_patterns)
        fields = {name.decode(): value.decode() for name, value in raw.items()}
        version = fields.pop(VERSION_FIELD, "0")
        # Fields of the hash's own start with '#' (no queue name does): #n counts the patterns.
        matcher = TopicMatcher({queue: json.loads(ps) for queue, ps in fields.items() if not queue.startswith("#")})
        with self._lock:
            self.rebuilds += 1
        return version, matcher

    def version(self, tenant: str) -> str:
        """The version of the tenant's patterns in the store (what a cached matcher is checked by)."""
        raw = self._shared.storage.call(self._shared.client.hget, k.TenantKeys(tenant).topic_patterns, VERSION_FIELD)
        return raw.decode() if raw else "0"

    def patterns(self, tenant: str, queue: str) -> list[str]:
        """The patterns ``queue`` attracts (read from the store: management, not the publish path)."""
        raw = self._shared.storage.call(self._shared.client.hget, k.TenantKeys(tenant).topic_patterns, queue)
        return json.loads(raw) if raw else []
