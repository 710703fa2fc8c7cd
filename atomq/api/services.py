"""What the views of one node share: the queue server, the tenant store and the node's state."""

from __future__ import annotations

import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from atomq import defaults
from atomq.errors import QuotaExceeded
from atomq.platform import OutgoingMessage, Published, QueueServer
from atomq.platform.executions import Executions
from atomq.platform.listeners import ListenerStore
from atomq.platform.rate_limit import RateLimiter
from atomq.platform.server_settings import REFRESH_S, ServerSettings, ServerSettingsStore
from atomq.platform.streams import StreamConsumers
from atomq.tenants import TenantStore


class LongPollLimiter:
    """Caps the blocking gets one tenant holds at once on this node.

    A get past the cap still runs, without waiting: a tenant with many
    consumers cannot hold every server thread in long-polls.
    """

    def __init__(self, per_tenant: int) -> None:
        self.per_tenant = per_tenant
        self._held: defaultdict[str, int] = defaultdict(int)
        self._lock = threading.Lock()

    @contextmanager
    def hold(self, tenant: str, wait_ms: int) -> Iterator[int]:
        """Yields the wait this get may have: ``wait_ms``, or 0 past the cap."""
        if wait_ms == 0:
            yield 0
            return
        with self._lock:
            granted = self._held[tenant] < self.per_tenant
            if granted:
                self._held[tenant] += 1
        try:
            yield wait_ms if granted else 0
        finally:
            if granted:
                with self._lock:
                    self._held[tenant] -= 1
                    if not self._held[tenant]:
                        del self._held[tenant]


@dataclass
class Services:
    """The node's services, kept in ``app.extensions["atomq"]``."""

    queues: QueueServer
    tenants: TenantStore
    longpolls: LongPollLimiter
    node_id: str = field(default_factory=lambda: f"n_{uuid.uuid4().hex[:12]}")
    stopping: threading.Event = field(default_factory=threading.Event)
    execution_run_within_ms: int = (defaults.EXECUTION_TIMEOUT_S + defaults.EXECUTION_GRACE_S) * 1000
    """How long a started execution may run before its listener counts it lost."""
    settings: ServerSettingsStore = field(init=False)
    listeners: ListenerStore = field(init=False)
    executions: Executions = field(init=False)
    streams: StreamConsumers = field(init=False)
    rate_limits: RateLimiter = field(init=False)
    _applied: ServerSettings | None = field(default=None, init=False)
    _attachments: dict[str, tuple[float, tuple[int, int]]] = field(default_factory=dict, init=False)
    _total_bytes: tuple[float, int] | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.settings = ServerSettingsStore(self.queues.storage)
        self.rate_limits = RateLimiter(self.queues.storage, self.node_id)
        self.listeners = ListenerStore(self.queues.storage)
        self.executions = Executions(self.queues, self.listeners, self.execution_run_within_ms)
        self.streams = StreamConsumers(self.queues)

    def attachments(self, tenant: str) -> tuple[int, int]:
        """The tenant's ``(rate_limit_per_minute, disk_quota_bytes)``, read again when older than a few seconds."""
        cached = self._attachments.get(tenant)
        now = time.monotonic()
        if cached is None or now - cached[0] > REFRESH_S:
            if len(self._attachments) > 10_000:
                self._attachments.clear()
            t = self.tenants.get(tenant)
            cached = (now, (t.rate_limit_per_minute, t.disk_quota_bytes))
            self._attachments[tenant] = cached
        return cached[1]

    def total_stored_bytes(self) -> int:
        """All tenants' stored bytes, as this node last summed them (every few seconds).

        The tenants' counters live in their own cluster slots, so no script can
        check the server-wide limit exactly; it holds to within a few seconds
        of sends, where each tenant's quota holds exactly.
        """
        cached = self._total_bytes
        now = time.monotonic()
        if cached is None or now - cached[0] > REFRESH_S:
            cached = (now, self.queues.total_stored_bytes())
            self._total_bytes = cached
        return cached[1]

    def send(self, tenant: str, queue: str, messages: Sequence[OutgoingMessage], incoming_bytes: int) -> list[str]:
        """Admits a send and stores it, all or nothing: the node's window, the tenant's window, the
        server's disk limit (``incoming_bytes`` against what all tenants store), the tenant's quota,
        then the store. A refused send takes no room in either window and counts as refused."""
        return self._admitted(tenant, incoming_bytes,
                              lambda quota: self.queues.send(tenant, queue, messages, quota_bytes=quota))

    def _admitted(self, tenant: str, incoming_bytes: int, store: Callable[[int], list[str]]) -> list[str]:
        """Runs ``store`` (given the tenant's quota) once the send it makes is admitted (see :meth:`send`)."""
        settings = self.current_settings()
        rate_limit, quota = self.attachments(tenant)
        with self.queues.counters.counting_refusals(tenant), self.rate_limits.send(
                tenant, rate_limit, settings.incoming_rate_limit_per_minute, settings.rate_limit_window_s):
            if settings.max_disk_bytes:
                used = self.total_stored_bytes()
                if used + incoming_bytes > settings.max_disk_bytes:
                    raise QuotaExceeded(
                        f"the server stores at most {settings.max_disk_bytes} bytes and holds {used}: "
                        "this send would pass it", limit=settings.max_disk_bytes, used=used, scope="server")
            return store(quota)

    def publish(self, tenant: str, topic: str, messages: Sequence[OutgoingMessage], incoming_bytes: int) -> Published:
        """Admits a publish as a send (one counted request, the same windows, limit and quota) and
        stores it in every queue its topic matches, or in none."""
        stored: list[Published] = []

        def store(quota: int) -> list[str]:
            stored.append(self.queues.publish(tenant, topic, messages, quota_bytes=quota))
            return stored[0].ids

        self._admitted(tenant, incoming_bytes, store)
        return stored[0]

    def current_settings(self) -> ServerSettings:
        """The shared server settings, applied to this node's queue server when they change."""
        current = self.settings.current()
        if current is not self._applied:
            self.queues.settings = current.queue_settings(self.queues.settings)
            self._applied = current
        return current
