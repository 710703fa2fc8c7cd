"""Which queues a topic reaches: each tenant's topic patterns, matched in the node and cached.

A publish must name every queue its script writes, so it needs the
tenant's patterns before it runs. The cache keeps a matcher per tenant with
the version of the patterns it was built from; the send script checks that
version, so a publish costs no extra round trip and a stale matcher costs
one retry, never a wrong publish.
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

    def matcher(self, tenant: str, refresh: bool = False) -> tuple[str, TopicMatcher]:
        """The tenant's matcher and the version of the patterns it holds, from the cache unless ``refresh``."""
        if not refresh:
            cached = self._matchers.get(tenant)
            if cached is not None:
                return cached
        raw = self._shared.storage.call(self._shared.client.hgetall, k.TenantKeys(tenant).topic_patterns)
        fields = {name.decode(): value.decode() for name, value in raw.items()}
        version = fields.pop(VERSION_FIELD, "0")
        # Fields of the hash's own start with '#' (no queue name does): #n counts the patterns.
        entry = (version, TopicMatcher({queue: json.loads(ps) for queue, ps in fields.items()
                                        if not queue.startswith("#")}))
        with self._lock:
            if len(self._matchers) > MAX_CACHED_TENANTS:
                self._matchers.clear()
            self._matchers[tenant] = entry
        return entry

    def version(self, tenant: str) -> str:
        """The version of the tenant's patterns in the store (what a cached matcher is checked by)."""
        raw = self._shared.storage.call(self._shared.client.hget, k.TenantKeys(tenant).topic_patterns, VERSION_FIELD)
        return raw.decode() if raw else "0"

    def patterns(self, tenant: str, queue: str) -> list[str]:
        """The patterns ``queue`` attracts (read from the store: management, not the publish path)."""
        raw = self._shared.storage.call(self._shared.client.hget, k.TenantKeys(tenant).topic_patterns, queue)
        return json.loads(raw) if raw else []
