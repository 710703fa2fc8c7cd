"""The queue server: per-tenant queues in Redis streams, used as a library.

Every operation that changes more than one key is one Lua script, so a crash
between any two calls leaves every count exact. Time comes from Redis
``TIME`` inside the scripts, never from this process's clock, so several
processes and restarts agree on deadlines and redelivery times.

The server is composed of parts, one behaviour each, that share the store
and the settings through one :class:`~atomq.platform.shared.Shared`:
components (queues, subscribers, their removal), routes (what a send fans
out to), sending, delivery (get and settle), management (what an operator
does to messages, and usage) and maintenance. Each public operation below is
the part's own method, so a caller sees one object and a reader finds each
behaviour in its own module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import redis

from atomq.errors import NotFound
from atomq.platform import keys as k
from atomq.platform.audit import repair_usage

from atomq.platform.components import Components
from atomq.platform.counters import MessageCounters
from atomq.platform.delivery import Deliveries
from atomq.platform.format import FORMAT_VERSION, check_format, record_format
from atomq.platform.management import Management
from atomq.platform.names import check_tenant_id
from atomq.platform.routes import Routes
from atomq.platform.sending import Sending
from atomq.platform.settings import QueueSettings
from atomq.platform.shared import Shared, docs_and_config, queue_not_found
from atomq.platform.storage import Storage

__all__ = ["DueWork", "QueueServer"]


@dataclass(frozen=True)
class DueWork:
    """One tenant's maintenance due now: destinations (by index name) to sweep, destinations
    holding messages past the retention, removals under way, and the bytes of expired
    de-duplication markers just taken off its usage."""

    due: list[str]
    old: list[str]
    removals: list[str]
    marker_bytes: int


class QueueServer:
    """The queue server core, shared by every tenant.

    Args:
        client: a redis-py client (standalone or cluster) with
            ``decode_responses=False``: documents may be bytes.
        settings: server-wide settings; defaults as in API.md.
    """

    def __init__(self, client: redis.Redis, settings: QueueSettings | None = None) -> None:
        self.storage = Storage(client)
        self._shared = Shared(self.storage, settings or QueueSettings())
        stored_format = check_format(client)
        self.storage.scripts.load_all(client)
        self.counters = MessageCounters(self.storage)
        routes = Routes(self._shared)
        components = Components(self._shared, routes)
        management = Management(self._shared, routes, components)
        sending = Sending(self._shared, routes, management)
        deliveries = Deliveries(self._shared, components)
        self._components_part = components

        self.put_queue = components.put_queue
        self.get_queue = components.get_queue
        self.list_queues = components.list_queues
        self.delete_queue = components.delete_queue
        self.put_subscriber = components.put_subscriber
        self.delete_subscriber = components.delete_subscriber
        self.resume_removals = components.resume_removals
        self.tenants = components.tenants
        self.destinations = components.destinations

        self.send = sending.send

        self.get = deliveries.get
        self.ack = deliveries.ack
        self.nack = deliveries.nack
        self.release = deliveries.release
        self.extend = deliveries.extend

        self.browse = management.browse
        self.dead_letters = management.dead_letters
        self.peek = management.peek
        self.delete_messages = management.delete_messages
        self.delete_dead_letters = management.delete_dead_letters
        self.resend_dead_letters = management.resend_dead_letters
        self.usage = management.usage
        self.total_stored_bytes = management.total_stored_bytes

        if stored_format < FORMAT_VERSION:
            self._migrate_from_format_1()

    @property
    def client(self) -> redis.Redis:
        return self.storage.client

    @property
    def settings(self) -> QueueSettings:
        return self._shared.settings

    @settings.setter
    def settings(self, settings: QueueSettings) -> None:
        """Replaces the settings for every part at once (the node does, when the shared server settings change)."""
        self._shared.settings = settings

    def readiness_problems(self) -> list[str]:
        """Why this server cannot do its work now: Redis unreachable, scripts gone, memory full."""
        try:
            memory = self.client.info("memory")
            if self.storage.scripts.missing(self.client):  # Redis restarted or flushed its scripts
                self.storage.scripts.load_all(self.client)
        except redis.RedisError as exc:
            return [f"Redis does not answer or refuses the scripts: {exc}"]
        limit = int(memory.get("maxmemory", 0))
        if limit and int(memory.get("used_memory", 0)) >= limit:
            return ["Redis is at its maxmemory and refuses writes"]
        return []

    def _migrate_from_format_1(self) -> None:
        """Recounts every tenant's usage with the bookkeeping and builds its due indexes.

        Idempotent, so nodes that start together may both run it; run the upgrade
        while no older node still writes, since it would count usage the old way.
        """
        for tenant in self._components_part.tenants():
            repair_usage(self._shared.client, tenant)
            self.sweep(tenant)
            self.purge(tenant)
        record_format(self._shared.client)

    def sweep(self, tenant: str) -> int:
        """Moves due redeliveries to ready and fails expired deliveries of every queue.

        Visits every destination and sets each one's place in the due index:
        the maintenance round visits only the due ones (:meth:`maintain`);
        this full walk is for the format migration and for operators.
        Returns the number of messages moved.
        """
        tk = k.TenantKeys(check_tenant_id(tenant))
        return sum(self._sweep(tk, qk, d) for qk, d in self._components_part.all_destinations(tk))

    def _sweep(self, tk: k.TenantKeys, qk: k.QueueKeys, d: k.DestinationKeys) -> int:
        moved = 0
        while True:
            try:
                n = int(self._shared.storage.run("sweep", docs_and_config(tk, qk) + d.as_list() + [tk.usage, tk.due, tk.oldest],
                                                 [self._shared.settings.delays_ms_arg, self._shared.settings.chunk_size,
                                                  d.member],
                                                 errors={"NOQUEUE": lambda: queue_not_found(qk.name)}))
            except NotFound:
                return moved  # removed since it was indexed; the script took it out of the indexes
            moved += n
            if n < self._shared.settings.chunk_size:
                return moved

    def _retention_cutoff_ms(self) -> int:
        seconds, micros = self._shared.storage.call(self._shared.client.time)
        return int(seconds * 1000 + micros // 1000 - round(self._shared.settings.document_retention_s * 1000))

    def purge(self, tenant: str) -> int:
        """Removes every message, queued or dead, whose documents are past the retention,
        visiting every destination and setting each one's place in the index of oldest
        messages (the maintenance round visits only those past the retention).

        Documents are created with their message, so a message id (which
        starts with its send time) dates its documents. Returns the count removed.
        """
        tk = k.TenantKeys(check_tenant_id(tenant))
        cutoff_ms = self._retention_cutoff_ms()
        return sum(self._purge(tk, qk, d, cutoff_ms) for qk, d in self._components_part.all_destinations(tk))

    def _purge(self, tk: k.TenantKeys, qk: k.QueueKeys, d: k.DestinationKeys, cutoff_ms: int) -> int:
        removed = self._shared.drain(tk, docs_and_config(tk, qk), d, "drop", "older", bound=str(cutoff_ms))
        self._shared.storage.run("oldest", [d.all, tk.oldest], [d.member])
        return removed

    def due_work(self, tenants: Sequence[str], limit: int = 100) -> dict[str, DueWork]:
        """What each tenant's maintenance has to do now, read from its indexes for all of
        ``tenants`` in one round trip; takes expired de-duplication markers off their usage."""
        args = [round(self._shared.settings.document_retention_s * 1000), limit]
        calls = [(t, k.TenantKeys(check_tenant_id(t))) for t in tenants]
        keys = {t: [tk.due, tk.oldest, tk.marker_ledger, tk.usage, tk.deleting] for t, tk in calls}
        pipe = self._shared.client.pipeline(transaction=False)
        for tenant, _ in calls:
            self._shared.storage.scripts.queue(pipe, "due", keys[tenant], args)
        replies = self._shared.storage.call(pipe.execute, raise_on_error=False)
        out = {}
        for (tenant, _), reply in zip(calls, replies):
            if isinstance(reply, Exception):  # NOSCRIPT on a node that lost its scripts, say: once more alone
                reply = self._shared.storage.run("due", keys[tenant], args)
            due, old, removals, freed = reply
            out[tenant] = DueWork(due=[m.decode() for m in due], old=[m.decode() for m in old],
                                  removals=[m.decode() for m in removals], marker_bytes=int(freed))
        return out

    def maintain(self, tenant: str, work: DueWork | None = None) -> dict[str, int]:
        """One round of maintenance for one tenant: finishes removals, sweeps the destinations
        that have something due, purges those holding messages past the retention.

        Visits only what the tenant's indexes say is due, so an idle queue costs
        nothing and a tenant with many queues does not slow the others' rounds.
        """
        tk = k.TenantKeys(check_tenant_id(tenant))
        if work is None:
            work = self.due_work([tenant])[tenant]
        for marker in work.removals:
            self._components_part.finish_removal(tk, marker)
        moved = sum(self._sweep(tk, *tk.destination_named(m)) for m in work.due)
        purged = 0
        if work.old:
            cutoff_ms = self._retention_cutoff_ms()
            purged = sum(self._purge(tk, *tk.destination_named(m), cutoff_ms) for m in work.old)
        return {"removals": len(work.removals), "moved": moved, "purged": purged,
                "marker_bytes": work.marker_bytes}
