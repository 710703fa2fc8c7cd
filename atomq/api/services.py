"""What the views of one node share: the queue server, the tenant store and the node's state."""

from __future__ import annotations

import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TypeVar

from atomq import defaults
from atomq.errors import AtomqError, MemoryLow, NotFound, QueueFull, RateLimited, StorageFull
from atomq.platform import OutgoingMessage, Overflow, Published, PublishedMany, QueueServer, Sent
from atomq.platform.guards.rate_limit import RateLimiter
from atomq.platform.guards.server_limits import reserve_room
from atomq.platform.guards.server_settings import REFRESH_S, ServerSettings, ServerSettingsStore
from atomq.platform.listeners.deployed import ListenerStore
from atomq.platform.listeners.executions import Executions
from atomq.platform.queues.sending import Admit
from atomq.platform.queues.streams import StreamConsumers
from atomq.platform.store import carried_check
from atomq.platform.store.refreshed import Refreshed
from atomq.platform.watch.memory_state import REFUSED_BELOW, MemoryWatch, refusal_rule, refuses
from atomq.tenants import TenantStore

Stored = TypeVar("Stored", Sent, Published, PublishedMany)


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
        """Yields the wait this get may have: ``wait_ms``, or 0 past the cap. The request's key is
        checked before it takes one of the tenant's places (``carried_check``): a bad key must not
        hold one, however briefly."""
        if wait_ms == 0:
            yield 0
            return
        carried_check.settle()
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
    memory: MemoryWatch = field(init=False)
    _applied: ServerSettings | None = field(default=None, init=False)
    _attachments: dict[str, tuple[float, tuple[int, int]]] = field(default_factory=dict, init=False)
    _total_usage: Refreshed[dict[str, int]] = field(init=False)
    held_sends: int = field(default=0, init=False)
    """Sends this process holds now for full flow_control queues, at most ``max_held_sends``."""
    max_held_sends: int = defaults.MAX_HELD_SENDS
    _held_lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    def __post_init__(self) -> None:
        self.settings = ServerSettingsStore(self.queues.storage)
        self._total_usage = Refreshed(self.queues.total_usage, REFRESH_S, "sum of all tenants' usage")
        self.memory = MemoryWatch(self.queues.storage, lambda: self.current_settings().memory_thresholds)
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

    def total_usage(self) -> dict[str, int]:
        """What all tenants store (``stored_bytes``, ``messages``), as this node last summed it
        (every few seconds).

        The tenants' counters live in their own cluster slots, so no script can
        check the server-wide limits exactly; they hold to within a few seconds
        of sends, where each tenant's quota and each queue's limits hold exactly. It is read in the
        background (``Refreshed``): it reads every tenant's slot, so a read while one primary fails
        over would hold every tenant's send.
        """
        return self._total_usage.get()

    def send(self, tenant: str, queue: str, messages: Sequence[OutgoingMessage], incoming_bytes: int,
             idempotency_key: str | None = None) -> Sent:
        """Admits a send and stores it, all or nothing: the node's window, the tenant's window, the
        memory state (by the send's lowest priority), the server's limits (``incoming_bytes``
        against what all tenants store), the tenant's quota, then the store, which holds the
        queue's limits. A refused send takes no room in either window and counts as refused by
        its reason. ``idempotency_key``: see ``Sending.send_batch``."""
        return self._admitted(tenant, incoming_bytes, messages, lambda quota, admit: self.queues.send_batch(
            tenant, queue, messages, quota_bytes=quota, idempotency_key=idempotency_key, admit=admit))

    def publish(self, tenant: str, topic: str, messages: Sequence[OutgoingMessage], incoming_bytes: int,
                idempotency_key: str | None = None) -> Published:
        """Admits a publish as a send (one counted request, the same windows, limits and quota) and
        stores it in every queue its topic matches, or in none."""
        return self._admitted(tenant, incoming_bytes, messages, lambda quota, admit: self.queues.publish(
            tenant, topic, messages, quota_bytes=quota, idempotency_key=idempotency_key, admit=admit))

    def publish_many(self, tenant: str, topics: Sequence[str], messages: Sequence[OutgoingMessage],
                     incoming_bytes: int, idempotency_key: str | None = None) -> PublishedMany:
        """Admits a publish of each message to its own topic as one send (see :meth:`publish`). A
        refusal after some groups of messages were stored (``Sending.publish_many``) names them in
        the error's ``details.ids`` (null for a message not stored), so the sender knows what a
        retry with the same dedupe ids recognises."""
        progress = PublishedMany(ids=[None] * len(messages))
        try:
            return self._admitted(tenant, incoming_bytes, messages, lambda quota, admit: self.queues.publish_many(
                tenant, topics, messages, quota_bytes=quota, progress=progress, idempotency_key=idempotency_key,
                admit=admit))
        except AtomqError as exc:
            if progress.stored:
                exc.details["ids"] = progress.ids
            raise

    def _admitted(self, tenant: str, incoming_bytes: int, messages: Sequence[OutgoingMessage],
                  store: Callable[[int, Admit | None], Stored]) -> Stored:
        """Runs ``store`` (given the tenant's quota, and what admits the copies it is about to make
        under the server's limits) once the send it makes is admitted (see :meth:`send`)."""
        settings = self.current_settings()
        rate_limit, quota = self.attachments(tenant)
        with self.queues.counters.counting_refusals(tenant), self.rate_limits.send(
                tenant, rate_limit, settings.incoming_rate_limit_per_minute, settings.rate_limit_window_s):
            lowest = min(defaults.DEFAULT_PRIORITY if m.priority is None else m.priority for m in messages) \
                if messages else defaults.DEFAULT_PRIORITY
            self.check_memory("this send", lowest, tenant)
            admit = self._server_room(settings, incoming_bytes)
            try:
                try:
                    return store(quota, admit)
                except QueueFull as full:
                    if not _waits_for_room(full):
                        raise
                    return self._held_until_room(full, settings.flow_control_wait_ms, lambda: store(quota, admit))
            except StorageFull:
                # The store reached its maxmemory before this node's reading said red.
                raise MemoryLow("the store is at its memory limit: sends are refused until consumers free "
                                "memory", memory_state="red", priority=REFUSED_BELOW["red"]) from None

    def check_creation(self, what: str, exists: Callable[[], object], tenant: str) -> None:
        """Refuses the creation of ``what`` while the tenant's memory state is red (503 memory_low);
        an update of what already exists goes on (``exists`` raises NotFound when it does not)."""
        if self.memory.state(tenant) == "red":
            try:
                exists()
            except NotFound:
                self.check_memory(f"creating {what}", tenant=tenant)

    def check_memory(self, what: str, lowest_priority: int = REFUSED_BELOW["red"] - 1,
                     tenant: str | None = None) -> None:
        """Refuses ``what`` (503 memory_low) when the memory state (of the tenant's primary, on a
        cluster) refuses its lowest priority; by default only red refuses (the creation of queues,
        subscribers and listeners)."""
        state = self.memory.state(tenant)
        if refuses(state, lowest_priority):
            raise MemoryLow(f"the store's memory state is {state} ({refusal_rule(state)}), so {what} is refused "
                            "until consumers free memory", memory_state=state, priority=REFUSED_BELOW[state])

    def _server_room(self, settings: ServerSettings, incoming_bytes: int) -> Admit | None:
        """What admits a send's copies under the server's limits, reserving room for them once
        (a send held for room tries again on the same reservation); None while no limit is set."""
        if not settings.max_disk_bytes and not settings.max_messages:
            return None
        reserved = False

        def admit(copies: int) -> None:
            nonlocal reserved
            if not reserved:
                reserve_room(self.queues.storage, copies, incoming_bytes, self.total_usage(),
                             settings.max_messages, settings.max_disk_bytes)
                reserved = True
        return admit

    def _held_until_room(self, full: QueueFull, wait_ms: int, store: Callable[[], Stored]) -> Stored:
        """Tries ``store`` again until its queue has room, for at most ``wait_ms``: a
        ``flow_control`` queue slows its producers down instead of refusing them. Past the wait,
        or while this process holds its most sends already, 429 ``queue_full``.

        No event tells a node that another made room (acks happen on any node), so the
        send polls, first soon, then every 200 ms.
        """
        deadline = time.monotonic() + wait_ms / 1000
        with self._held_lock:
            room = self.held_sends < self.max_held_sends
            if room:
                self.held_sends += 1
        if room:
            try:
                pause = 0.01
                while not self.stopping.is_set() and time.monotonic() + pause < deadline:
                    self.stopping.wait(pause)
                    pause = min(pause * 2, 0.2)
                    try:
                        return store()
                    except QueueFull as again:
                        # Another queue of the same publish may refuse for good: that is its answer.
                        if not _waits_for_room(again):
                            raise
                        full = again
            finally:
                with self._held_lock:
                    self.held_sends -= 1
        raise RateLimited(f"{full.message} (held {wait_ms} ms for room: flow_control)", code="queue_full",
                          retry_after=1, **full.details)

    def current_settings(self) -> ServerSettings:
        """The shared server settings, applied to this node's queue server when they change."""
        current = self.settings.current()
        if current is not self._applied:
            self.queues.settings = current.queue_settings(self.queues.settings)
            self._applied = current
        return current


def _waits_for_room(full: QueueFull) -> bool:
    """Whether a send refused by ``full`` waits for room: a ``flow_control`` queue, and a send that
    fits once consumers make room."""
    return full.details.get("overflow") == Overflow.FLOW_CONTROL.value and bool(full.can_fit)
